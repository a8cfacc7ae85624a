# Debian packages with CPack: `cpack -G DEB` in a build folder (configured with any prefix; the
# packages install under /usr) writes three packages for Debian 12, one per install component:
#   cohort          (runtime) cohortrun, cohortd, cohortctl, the trainers, man pages, bash completion,
#                   cohortd.service, the `cohort` Python package for workers
#   libcohortX.Y    (lib)     the shared library libcohort.so.X.Y (X.Y: its SOVERSION)
#   libcohort-dev   (dev)     headers, the static libraries, libcohort.so, the CMake package and
#                   cohort.pc
# The shared library has a package of its own because Debian policy (8.1) puts a shared library
# in a package named after its soname, which -dev packages then depend on; lintian checks it.
#
# CPack rather than debian/ and dpkg-buildpackage: the packages are made from the very build the
# test suite ran (no second build of the whole tree), with the same install rules `cmake
# --install` uses. What debhelper would add is written out under packaging/debian/: copyright,
# changelog, the maintainer scripts of the service, the ldconfig trigger. dpkg-shlibdeps computes
# the binaries' dependencies; the -dev package's are what cohortConfig.cmake's find_dependency
# calls and cohort.pc need. tests/install/deb_test.sh checks them all with lintian and in a bare
# Debian 12 root.
#
# Included from cmake/install.cmake (after its rules, never in a wheel or a sanitizer build).

set(COHORT_DEB_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
set(COHORT_DEB_LIB_PACKAGE libcohort${COHORT_DEB_SOVERSION})
set(COHORT_DEB_MAINTAINER "cohort maintainers <maintainers@users.noreply.a-seed-bb8bea7e.example>"
    CACHE STRING "The Maintainer field of the Debian packages (name <address>)")

# ---- files every package carries: /usr/share/doc/<package>/{copyright,changelog.gz} -------------
# Installed only for CPack (EXCLUDE_FROM_ALL: a plain `cmake --install` leaves them out, a
# component install takes them).
configure_file(${PROJECT_SOURCE_DIR}/packaging/debian/changelog.in
               ${PROJECT_BINARY_DIR}/packaging/changelog @ONLY)
add_custom_command(OUTPUT ${PROJECT_BINARY_DIR}/packaging/changelog.gz
  COMMAND ${COHORT_GZIP} -9nc ${PROJECT_BINARY_DIR}/packaging/changelog
          > ${PROJECT_BINARY_DIR}/packaging/changelog.gz
  DEPENDS ${PROJECT_BINARY_DIR}/packaging/changelog
  COMMENT "Debian changelog"
  VERBATIM)
add_custom_target(cohort_deb_docs ALL DEPENDS ${PROJECT_BINARY_DIR}/packaging/changelog.gz)
set(_cohort_deb_packages runtime cohort)
if(TARGET cohort_shared)
  list(APPEND _cohort_deb_packages lib ${COHORT_DEB_LIB_PACKAGE} dev libcohort-dev)
endif()
while(_cohort_deb_packages)
  list(POP_FRONT _cohort_deb_packages _component _package)
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/debian/copyright
                ${PROJECT_BINARY_DIR}/packaging/changelog.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${_package} COMPONENT ${_component}
          EXCLUDE_FROM_ALL)
endwhile()
# lintian overrides, each with its reason (packaging/debian/*/lintian-overrides.in).
if(TARGET cohort_shared)
  configure_file(${PROJECT_SOURCE_DIR}/packaging/debian/libcohort/lintian-overrides.in
                 ${PROJECT_BINARY_DIR}/packaging/lintian/${COHORT_DEB_LIB_PACKAGE} @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/packaging/lintian/${COHORT_DEB_LIB_PACKAGE}
          DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides COMPONENT lib EXCLUDE_FROM_ALL)
endif()

# ---- CPack ---------------------------------------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME cohort)
set(CPACK_PACKAGE_VENDOR "cohort")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${COHORT_DEB_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# The install rules run with CMAKE_INSTALL_PREFIX=/usr and DESTDIR set to the staging folder, so
# that cohortd.service (written at install time) names /usr/bin/cohortd and goes to
# /lib/systemd/system (cmake/install.cmake).
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
# Only what this build made: a library-only build has no cohort package, a launcher-only build no
# library packages.
set(CPACK_COMPONENTS_ALL "")
if(TARGET cohortrun OR TARGET cohortd)
  list(APPEND CPACK_COMPONENTS_ALL runtime)
endif()
if(TARGET cohort_shared)
  list(APPEND CPACK_COMPONENTS_ALL lib dev)
endif()
set(CPACK_COMPONENTS_GROUPING IGNORE)
if(COHORT_HAVE_CUDA)
  message(STATUS "cohort: this build links the CUDA toolkit's libraries, which no Debian package "
                 "provides: for Debian packages that start on any machine, cpack a build "
                 "configured with -DCOHORT_CUDA=OFF")
endif()

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)

set(_pkg ${PROJECT_SOURCE_DIR}/packaging/debian)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME cohort)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION utils)
# Python workers need a python3 with PyTorch; the trainers' default data are these packages.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "python3, python3-torch, dataset-fashion-mnist, fortunes")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA
    "${_pkg}/cohort/postinst;${_pkg}/cohort/prerm;${_pkg}/cohort/postrm")
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
"torchrun-compatible launcher and TCPStore-compatible rendezvous store
cohortrun starts and keeps alive data-parallel training jobs on one machine
or many (static, elastic, or under Slurm). It takes torchrun's flags and
gives workers torchrun's environment, so PyTorch scripts run unchanged; it
sees a worker die at once, restarts the whole group and names the root
cause of a failure.

cohortd is a rendezvous store, wire-compatible with PyTorch's TCPStore,
optionally persistent and token-protected; cohortd.service runs it under
systemd (installed, not enabled). cohortctl status shows the jobs in a store:
rounds, workers' heartbeats and steps, stragglers, failures and root causes.

Also: two example trainers written from scratch (a Fashion-MNIST CNN and a
small GPT), man pages and bash completion.")

set(CPACK_DEBIAN_LIB_PACKAGE_NAME ${COHORT_DEB_LIB_PACKAGE})
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# The shlibs file (CPack has no per-component switch; only this package has a shared library).
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA
    "${_pkg}/libcohort/triggers;${_pkg}/libcohort/postinst;${_pkg}/libcohort/postrm")
set(CPACK_COMPONENT_LIB_DESCRIPTION
"worker runtime of cohort (shared library)
libcohort gives C++ programs started by cohortrun, torchrun, Slurm or Open
MPI their ranks, collectives on CPU (shared memory within a host, TCP between
hosts), heartbeats, error files and a DistributedSampler identical to
PyTorch's.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libcohort-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF)
# The shared library of the same version; what cohortConfig.cmake's find_dependency calls and
# cohort.pc's Requires.private find; GCC's libbacktrace.a, which libcohort.a's link interface
# names by its path.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "${COHORT_DEB_LIB_PACKAGE} (= ${PROJECT_VERSION}), libspdlog-dev, nlohmann-json3-dev, libcli11-dev, zlib1g-dev, libssl-dev")
set(_cohort_backtrace "")
foreach(_dep IN LISTS _cohort_deps)
  if(_dep MATCHES "/gcc/[^/]+/([0-9]+)/libbacktrace\\.a$")
    string(APPEND CPACK_DEBIAN_DEV_PACKAGE_DEPENDS ", libgcc-${CMAKE_MATCH_1}-dev")
  endif()
endforeach()
set(CPACK_COMPONENT_DEV_DESCRIPTION
"worker runtime of cohort (development files)
Headers, static libraries, the CMake package (find_package(cohort): targets
cohort::cohort and cohort::cohort_static) and pkg-config file (cohort.pc)
of libcohort, the worker runtime of cohort: ranks, collectives on CPU,
heartbeats and error files for C++ programs under cohortrun or torchrun.")

include(CPack)
