# Installation: `cmake --install <build> --prefix <dir>` installs the binaries that were built
# (cohortrun, cohortd, the trainers), libcohort (static libcohort.a and shared libcohort.so, built
# from the same objects), the public headers, a CMake package (find_package(cohort): targets
# cohort::cohort, the shared library, and cohort::cohort_static) and a pkg-config file (cohort.pc).
#
# Included from the top-level CMakeLists.txt after every product folder, so that it can reach their
# targets without those folders knowing about installation.

# Libraries go to lib/<multiarch triplet> on Debian under every prefix, not only /usr (where
# GNUInstallDirs alone puts them there): ld.so, pkg-config and find_package look in
# <prefix>/lib/<triplet> too, and one build then makes both `cmake --install` and the Debian
# packages (lintian wants their cohort.pc in /usr/lib/<triplet>/pkgconfig). A build folder
# configured before this holds GNUInstallDirs' default "lib" in its cache: that is replaced; any
# other value given with -DCMAKE_INSTALL_LIBDIR is kept.
if(CMAKE_LIBRARY_ARCHITECTURE AND EXISTS /etc/debian_version)
  get_property(_libdir_help CACHE CMAKE_INSTALL_LIBDIR PROPERTY HELPSTRING)
  if(NOT DEFINED CACHE{CMAKE_INSTALL_LIBDIR} OR
     (CMAKE_INSTALL_LIBDIR STREQUAL "lib" AND _libdir_help STREQUAL "Object code libraries (lib)"))
    set(CMAKE_INSTALL_LIBDIR lib/${CMAKE_LIBRARY_ARCHITECTURE} CACHE PATH
        "Object code libraries (lib/<multiarch triplet> on Debian)" FORCE)
  endif()
endif()
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Sanitizer and fuzz builds are for tests only: nothing to install (their libraries would need
# the sanitizer runtime in every program that loads them), and no shared library or man pages to
# build.
# COHORT_INSTALL=OFF: no install rules or package either (scripts/gpu_check.sh, whose
# dependencies lie inside its build folder, where no installed package could name them).
if(COHORT_SANITIZE OR COHORT_FUZZ OR NOT COHORT_INSTALL)
  return()
endif()

# Where cohortConfig.cmake is installed, relative to the prefix.
set(COHORT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/cohort)

# cohort_install_interface_includes(<target>...): the folders' libraries publish their source
# include/ folders; an exported target must name the installed one instead. Rewrites each target's
# INTERFACE_INCLUDE_DIRECTORIES to $<BUILD_INTERFACE:...> plus the installed include folder.
function(cohort_install_interface_includes)
  foreach(t IN LISTS ARGN)
    get_target_property(dirs ${t} INTERFACE_INCLUDE_DIRECTORIES)
    set(rewritten "")
    foreach(d IN LISTS dirs)
      if(d MATCHES "^\\$<")
        list(APPEND rewritten "${d}")
      else()
        list(APPEND rewritten "$<BUILD_INTERFACE:${d}>")
      endif()
    endforeach()
    list(APPEND rewritten "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
    set_target_properties(${t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${rewritten}")
  endforeach()
endfunction()

# ---- binaries ------------------------------------------------------------------------------------
# In a wheel (pip install ., pyproject.toml: scikit-build-core sets SKBUILD), the binaries go to the
# environment's bin (its scripts folder) and nothing else is installed: no man pages, unit or
# library.
if(SKBUILD)
  foreach(_bin cohortrun cohortd cohortctl)
    if(TARGET ${_bin})
      install(TARGETS ${_bin} RUNTIME DESTINATION ${SKBUILD_SCRIPTS_DIR} COMPONENT runtime)
    endif()
  endforeach()
  return()
endif()
foreach(_bin cohortrun cohortd cohortctl cohort-train-fmnist cohort-train-gpt)
  if(TARGET ${_bin})
    install(TARGETS ${_bin} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
  endif()
endforeach()
# The Python packages for Python workers (`cohort`, and cohortrun's worker module `_cohort_worker`
# with its boot folder), where an installed cohortrun looks for them to put on its workers'
# PYTHONPATH: <prefix>/lib/cohort/python (launcher/plan/job_plan.cc; "lib" whatever
# CMAKE_INSTALL_LIBDIR is, as it holds no library).
if(TARGET cohortrun)
  foreach(_package cohort _cohort_worker)
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/${_package} DESTINATION lib/cohort/python
            COMPONENT runtime FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
  endforeach()
endif()

# ---- libcohort -----------------------------------------------------------------------------------
if(TARGET cohort)
  # The shared library is the static one's objects (every object is position-independent) plus,
  # linked in privately, the static libraries they need: a program that links libcohort.so needs
  # only its headers and Threads.
  add_library(cohort_shared SHARED $<TARGET_OBJECTS:cohort>)
  get_target_property(_cohort_deps cohort LINK_LIBRARIES)
  target_link_libraries(cohort_shared PRIVATE ${_cohort_deps} PUBLIC Threads::Threads)
  get_target_property(_cohort_defs cohort INTERFACE_COMPILE_DEFINITIONS)
  if(_cohort_defs)
    target_compile_definitions(cohort_shared PUBLIC ${_cohort_defs})
  endif()
  # Worker error files carry a symbolised stack: the program's symbols must be exported (as the
  # static target's INTERFACE option does).
  target_link_options(cohort_shared INTERFACE -rdynamic)
  target_include_directories(cohort_shared INTERFACE
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/worker_runtime/include>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/rendezvous/include>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/base/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  # 0.x: every minor release may break the ABI.
  set_target_properties(cohort_shared PROPERTIES
    OUTPUT_NAME cohort EXPORT_NAME cohort
    VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  set_target_properties(cohort PROPERTIES EXPORT_NAME cohort_static)
  add_library(cohort::cohort ALIAS cohort_shared)
  add_library(cohort::cohort_static ALIAS cohort)

  # The static library's link interface names the static libraries it was built from (their
  # objects are not copied into libcohort.a): they are installed and exported beside it.
  set_target_properties(cohort_base PROPERTIES EXPORT_NAME base OUTPUT_NAME cohort_base)
  set_target_properties(cohort_rdzv_client PROPERTIES EXPORT_NAME rdzv_client)
  set_target_properties(cohort_rdzv_server PROPERTIES EXPORT_NAME rdzv_server)
  set_target_properties(cohort_asio PROPERTIES EXPORT_NAME asio)
  cohort_install_interface_includes(cohort cohort_base cohort_rdzv_client)
  set(_cohort_exported cohort cohort_shared cohort_base cohort_rdzv_client cohort_rdzv_server
                       cohort_asio)
  # A CUDA build links NCCL and the CUDA runtime (cmake/cuda.cmake's interface target, which names
  # NCCL by its path and the runtime as CUDA::cudart): the package config finds CUDAToolkit.
  set(COHORT_CONFIG_CUDA "")
  if(TARGET cohort_nccl)
    set_target_properties(cohort_nccl PROPERTIES EXPORT_NAME nccl)
    list(APPEND _cohort_exported cohort_nccl)
    set(COHORT_CONFIG_CUDA "find_dependency(CUDAToolkit)")
  endif()

  install(TARGETS ${_cohort_exported}
    EXPORT cohortTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
    # The shared library itself is component lib (Debian: libcohortX.Y), its libcohort.so link dev.
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT lib NAMELINK_COMPONENT dev
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  # The public headers: libcohort's and the two folders' it includes (the error hierarchy, the
  # environment, the store interface).
  foreach(_dir worker_runtime/include base/include rendezvous/include)
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_dir}/cohort DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
            COMPONENT dev FILES_MATCHING PATTERN "*.h"
            # cohort's own command-line conventions: they need CLI11, not a library user's concern
            PATTERN "cli11.h" EXCLUDE)
  endforeach()

  install(EXPORT cohortTargets NAMESPACE cohort:: FILE cohortTargets.cmake
          DESTINATION ${COHORT_INSTALL_CMAKEDIR} COMPONENT dev)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/cohortConfig.cmake.in
    ${PROJECT_BINARY_DIR}/cohortConfig.cmake INSTALL_DESTINATION ${COHORT_INSTALL_CMAKEDIR})
  # 0.x: a minor release may break the API, so only the same major.minor is compatible.
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/cohortConfigVersion.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/cohortConfig.cmake ${PROJECT_BINARY_DIR}/cohortConfigVersion.cmake
          DESTINATION ${COHORT_INSTALL_CMAKEDIR} COMPONENT dev)

  # pkg-config: `pkg-config --cflags --libs cohort` links the shared library; with --static, the
  # static one and what it needs.
  # The prefix is found from the .pc file's own place, so that `cmake --install --prefix` anywhere
  # (and a package's root) gives a file that points at itself.
  file(RELATIVE_PATH COHORT_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
  string(REGEX REPLACE "/$" "" COHORT_PC_TO_PREFIX "${COHORT_PC_TO_PREFIX}")
  set(COHORT_PC_LIBS_PRIVATE "-lcohort_rdzv_server -lcohort_rdzv_client -lcohort_base -lspdlog -lfmt")
  # GCC's libbacktrace.a lies in the compiler's own folder, which it searches: -lbacktrace, not
  # its path (a path with the triplet in it would tie the file to one architecture).
  foreach(_dep IN LISTS _cohort_deps)
    if(_dep MATCHES "libbacktrace\\.a$")
      string(APPEND COHORT_PC_LIBS_PRIVATE " -lbacktrace")
    endif()
  endforeach()
  string(APPEND COHORT_PC_LIBS_PRIVATE " -ldl -lrt")
  configure_file(${PROJECT_SOURCE_DIR}/cmake/cohort.pc.in ${PROJECT_BINARY_DIR}/cohort.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/cohort.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
          COMPONENT dev)
endif()

# ---- man pages, bash completion, the systemd unit ------------------------------------------------
# Man pages from each binary's --help and --version (help2man), completion scripts from the same
# option definitions (--print-completion bash), both at build time, so they never drift from the
# programs.
find_program(COHORT_HELP2MAN help2man)
find_program(COHORT_GZIP gzip)
set(_cohort_man_dir ${PROJECT_BINARY_DIR}/man/man1)
set(_cohort_completion_dir ${PROJECT_BINARY_DIR}/completions)
set(_cohort_doc_outputs "")
set(_cohort_summary_cohortrun "launch data-parallel training jobs (torchrun-compatible)")
set(_cohort_summary_cohortd "rendezvous store, wire-compatible with PyTorch's TCPStore")
set(_cohort_summary_cohortctl "look at the jobs running on a rendezvous store")
set(_cohort_summary_cohort-train-fmnist "train the Fashion-MNIST CNN, data parallel")
set(_cohort_summary_cohort-train-gpt "train a small byte-level GPT, data parallel")
foreach(_bin cohortrun cohortd cohortctl cohort-train-fmnist cohort-train-gpt)
  if(NOT TARGET ${_bin})
    continue()
  endif()
  if(COHORT_HELP2MAN AND COHORT_GZIP)
    add_custom_command(OUTPUT ${_cohort_man_dir}/${_bin}.1.gz
      COMMAND ${CMAKE_COMMAND} -E make_directory ${_cohort_man_dir}
      COMMAND ${COHORT_HELP2MAN} --no-info --name ${_cohort_summary_${_bin}}
              --output ${_cohort_man_dir}/${_bin}.1 $<TARGET_FILE:${_bin}>
      COMMAND ${COHORT_GZIP} -9nf ${_cohort_man_dir}/${_bin}.1
      DEPENDS ${_bin}
      COMMENT "man page ${_bin}.1"
      VERBATIM)
    list(APPEND _cohort_doc_outputs ${_cohort_man_dir}/${_bin}.1.gz)
    install(FILES ${_cohort_man_dir}/${_bin}.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
            COMPONENT runtime)
  endif()
  add_custom_command(OUTPUT ${_cohort_completion_dir}/${_bin}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${_cohort_completion_dir}
    COMMAND sh -c "\"$1\" --print-completion bash > \"$2\"" sh $<TARGET_FILE:${_bin}>
            ${_cohort_completion_dir}/${_bin}
    DEPENDS ${_bin}
    COMMENT "bash completion for ${_bin}"
    VERBATIM)
  list(APPEND _cohort_doc_outputs ${_cohort_completion_dir}/${_bin})
  install(FILES ${_cohort_completion_dir}/${_bin}
          DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions COMPONENT runtime)
endforeach()
if(NOT COHORT_HELP2MAN)
  message(STATUS "help2man not found: no man pages (scripts/setup.sh installs it)")
endif()
add_custom_target(cohort_docs ALL DEPENDS ${_cohort_doc_outputs})

if(TARGET cohortd)
  # The unit names the installed cohortd, so it is written at install time, when the prefix is
  # known (`cmake --install --prefix` may differ from the configured one). Debian 12 keeps units in
  # /lib/systemd/system (lintian: systemd-service-file-outside-lib), so the prefix /usr puts it
  # there; another prefix, in its own lib/systemd/system.
  install(CODE "
    set(_bindir \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
    if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
      set(_unitdir /lib/systemd/system)
    else()
      set(_unitdir \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\")
    endif()
    file(READ \"${PROJECT_SOURCE_DIR}/packaging/cohortd.service.in\" _unit)
    string(REPLACE \"@CMAKE_INSTALL_FULL_BINDIR@\" \"\${_bindir}\" _unit \"\${_unit}\")
    file(WRITE \"${PROJECT_BINARY_DIR}/install-unit/cohortd.service\" \"\${_unit}\")
    file(INSTALL \"${PROJECT_BINARY_DIR}/install-unit/cohortd.service\" DESTINATION \"\${_unitdir}\")
  " COMPONENT runtime)
  # The build tree's copy (for tests/install/systemd_test.sh) names the configured prefix.
  configure_file(${PROJECT_SOURCE_DIR}/packaging/cohortd.service.in
                 ${PROJECT_BINARY_DIR}/cohortd.service @ONLY)
endif()

include(${PROJECT_SOURCE_DIR}/cmake/package.cmake)
