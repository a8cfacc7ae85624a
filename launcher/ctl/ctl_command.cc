#include "ctl/ctl_command.h"

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "cohort/base/cli11.h"
#include "cohort/base/net.h"
#include "cohort/base/printable.h"
#include "cohort/error.h"
#include "cohort/rdzv/auth.h"
#include "cohort/rdzv/tcp_store.h"
#include "ctl/job_status.h"
#include "ctl/status_view.h"
#include "failure/failure.h"

namespace cohort::launch {
namespace {

constexpr const char* kTokenEnv = "COHORT_STORE_TOKEN_FILE";

// What one look at the store shows: the text (or JSON) to print.
std::string look(TcpStore& store, const CtlConfig& c) {
  auto jobs = group_jobs(store.list_keys());
  const double now = wall_clock_now();
  std::string name = c.job;
  if (name.empty() && jobs.size() == 1) name = jobs.begin()->first;
  if (!name.empty()) {
    auto it = jobs.find(name);
    if (it == jobs.end()) {
      std::string known;
      for (const auto& [id, keys] : jobs) known += (known.empty() ? "" : ", ") + id;
      throw std::runtime_error("no job '" + name + "' in the store at " + store.address() +
                               (known.empty() ? " (it holds no job)" : "; its jobs: " + known));
    }
    JobStatus job = read_job(store, it->first, it->second);
    return c.json ? job_detail_json(job, now) + "\n" : printable(render_job_detail(job, now));
  }
  std::vector<JobStatus> all;
  for (const auto& [id, keys] : jobs) all.push_back(read_job(store, id, keys));
  // Job names, hosts, states and tracebacks are what clients of the store wrote: a terminal
  // must not act on an escape sequence in them (the JSON escapes them itself).
  return c.json ? job_list_json(all, now) + "\n" : printable(render_job_list(all, now));
}

}  // namespace

int parse_ctl_args(int argc, char** argv, CtlConfig* config) {
  CLI::App app("cohortctl: look at the jobs running on a rendezvous store (cohortd)");
  app.require_subcommand(1);
  CLI::App* status = app.add_subcommand(
      "status",
      "Without --job: one line per job of the store; with --job (or when the store holds one "
      "job): its rounds, nodes, workers (heartbeats, steps, throughput), stragglers and failures "
      "with their root cause");
  status->add_option("--store", config->store, "The store: HOST:PORT of cohortd")
      ->required()
      ->type_name("HOST:PORT");
  status
      ->add_option(
          "--token-file", config->token_file,
          std::string("The store's token (cohortd --auth-token-file); default: $") + kTokenEnv)
      ->type_name("PATH");
  status->add_option("--job", config->job, "The run id (--rdzv-id) of the job to show")
      ->type_name("RUN_ID");
  status->add_flag("--json", config->json, "One JSON document, for scripts");
  status->add_flag("--watch", config->watch,
                   "Redraw every --interval seconds until Ctrl-C (SIGINT) or SIGTERM");
  status->add_option("--interval", config->interval_s, "Seconds between redraws with --watch")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 86400.0))
      ->type_name("SECONDS");
  status
      ->add_option("--connect-timeout", config->connect_timeout_s,
                   "Seconds to wait for the store to answer")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 86400.0))
      ->type_name("SECONDS");
  // For tests: stop --watch after N refreshes.
  status->add_option("--count", config->count)->group("")->check(CLI::NonNegativeNumber);
  cli::apply(app,
             {.program = "cohortctl", .env_prefix = "", .config_file = false, .placeholders = {}});
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli::exit_status(app, e);
  }
  if (config->token_file.empty()) {
    if (const char* f = std::getenv(kTokenEnv)) config->token_file = f;
  }
  return -1;
}

int run_status(const CtlConfig& c) {
  TcpStoreOptions o;
  try {
    HostPort hp = parse_host_port(c.store, 29500);
    o.host = hp.host;
    o.port = hp.port;
    if (!c.token_file.empty()) o.auth_token = auth::read_token_file(c.token_file);
  } catch (const UsageError& e) {  // a bad --store or --token-file: exit 2, as usage errors do
    std::fprintf(stderr, "cohortctl: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohortctl: %s\n", e.what());
    return 1;
  }
  const auto limit = std::chrono::milliseconds(static_cast<int64_t>(c.connect_timeout_s * 1000));
  o.connect_timeout = limit;
  o.timeout = limit;
  // One record is kilobytes; a value larger than this is someone else's, and not read whole.
  o.max_reply_bytes = 4 << 20;
  std::optional<TcpStore> store;
  try {
    store.emplace(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohortctl: %s\n", e.what());
    return 1;
  }
  // A cohortd with a token answers VALIDATE and PING to anyone, then closes the connection at the
  // first real request of a client that did not prove the token: ask one (CHECK, which every
  // server knows) so that this is told apart from a server without LIST_KEYS.
  try {
    std::vector<std::string> probe{"cohort/"};
    store->check(probe);
  } catch (const std::exception& e) {
    if (c.token_file.empty()) {
      std::fprintf(stderr,
                   "cohortctl: the store at %s closed the connection at our first request: it "
                   "needs a token (cohortd --auth-token-file); give it with --token-file PATH "
                   "(or %s=PATH)\n",
                   store->address().c_str(), kTokenEnv);
    } else {
      std::fprintf(stderr, "cohortctl: %s\n", e.what());
    }
    return 1;
  }

  if (!c.watch) {
    try {
      std::fputs(look(*store, c).c_str(), stdout);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cohortctl: %s\n", printable(e.what()).c_str());
      return 1;
    }
  }

  // --watch: SIGINT and SIGTERM are taken synchronously (sigtimedwait), so that one ends the
  // wait between redraws at once.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  for (int n = 1;; ++n) {
    std::string text;
    try {
      text = look(*store, c);
    } catch (const std::exception& e) {
      text = "cohortctl: " + printable(e.what()) + " (retrying)\n";
    }
    if (tty) std::fputs("\033[H\033[2J", stdout);
    std::fputs(text.c_str(), stdout);
    if (!tty && !c.json) std::fputs("\n", stdout);
    std::fflush(stdout);
    if (c.count > 0 && n >= c.count) return 0;
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(c.interval_s);
    ts.tv_nsec = static_cast<long>((c.interval_s - std::floor(c.interval_s)) * 1e9);
    int sig = ::sigtimedwait(&stop, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) return 0;
  }
}

}  // namespace cohort::launch
