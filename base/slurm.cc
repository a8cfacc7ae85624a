#include "cohort/base/slurm.h"

#include <netdb.h>
#include <sys/socket.h>

#include <cctype>
#include <stdexcept>

#include "cohort/base/parse.h"
#include "cohort/error.h"

namespace cohort::slurm {
namespace {

UsageError bad(const std::string& text, const std::string& why) {
  return UsageError("hostlist '" + text + "': " + why);
}

// Splits at top-level separators (',' or whitespace outside brackets).
std::vector<std::string> split_entries(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') {
      if (depth == 0) throw bad(text, "']' without '['");
      --depth;
    }
    if (depth == 0 && (c == ',' || std::isspace(static_cast<unsigned char>(c)))) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      continue;
    }
    cur.push_back(c);
  }
  if (depth != 0) throw bad(text, "'[' without ']'");
  if (!cur.empty()) out.push_back(cur);
  return out;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// "01-04,07" -> {"01","02","03","04","07"}; more than max_numbers numbers is an error (checked
// before expanding: "[0-65535,0-65535,...]" must not allocate its way to an out-of-memory).
std::vector<std::string> expand_group(const std::string& group, const std::string& text,
                                      size_t max_numbers) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= group.size()) {
    size_t comma = group.find(',', start);
    std::string item =
        group.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    auto dash = item.find('-');
    std::string lo = item.substr(0, dash);
    std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi)) {
      throw bad(text, "'[" + group + "]' must hold numbers and lo-hi ranges (got '" + item + "')");
    }
    if (lo.size() > 18 || hi.size() > 18) throw bad(text, "number too long in '" + item + "'");
    uint64_t a = std::stoull(lo), b = std::stoull(hi);
    if (b < a) throw bad(text, "range '" + item + "' runs backwards");
    if (b - a >= 65536) throw bad(text, "range '" + item + "' is too large");
    if (out.size() + (b - a + 1) > max_numbers) {
      throw bad(text, "expands to more than " + std::to_string(max_numbers) + " hosts");
    }
    size_t width = lo.size();  // "001-100": every number padded to 3 digits
    for (uint64_t v = a; v <= b; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      out.push_back(s);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int to_int(const std::string& name, const std::string& v) {
  auto x = parse_int(v, 0, 1 << 30);
  if (!x) throw UsageError(name + "='" + v + "' is not a non-negative integer");
  return *x;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& text, size_t max_hosts) {
  std::vector<std::string> hosts;
  for (const std::string& entry : split_entries(text)) {
    // Alternate literal text and bracket groups; expand as a cartesian product.
    std::vector<std::string> partial{""};
    size_t i = 0;
    while (i < entry.size()) {
      size_t open = entry.find('[', i);
      std::string literal =
          entry.substr(i, open == std::string::npos ? std::string::npos : open - i);
      for (auto& p : partial) p += literal;
      if (open == std::string::npos) break;
      size_t close = entry.find(']', open);
      std::string group = entry.substr(open + 1, close - open - 1);
      if (group.find('[') != std::string::npos) throw bad(text, "nested '['");
      std::vector<std::string> numbers = expand_group(group, text, max_hosts);
      if (partial.size() * numbers.size() + hosts.size() > max_hosts) {
        throw bad(text, "expands to more than " + std::to_string(max_hosts) + " hosts");
      }
      std::vector<std::string> next;
      next.reserve(partial.size() * numbers.size());
      for (const auto& p : partial)
        for (const auto& n : numbers) next.push_back(p + n);
      partial.swap(next);
      i = close + 1;
    }
    for (auto& p : partial) {
      if (p.empty()) throw bad(text, "empty host name");
      hosts.push_back(std::move(p));
    }
    if (hosts.size() > max_hosts)
      throw bad(text, "more than " + std::to_string(max_hosts) + " hosts");
  }
  return hosts;
}

std::vector<int> expand_counts(const std::string& text, size_t max_entries) {
  std::vector<int> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int repeat = 1;
    auto paren = item.find("(x");
    if (paren != std::string::npos) {
      if (item.back() != ')') throw UsageError("counts '" + text + "': bad '" + item + "'");
      repeat = to_int("repeat", item.substr(paren + 2, item.size() - paren - 3));
      item = item.substr(0, paren);
    }
    int v = to_int("count", item);
    if (out.size() + static_cast<size_t>(repeat) > max_entries) {
      throw UsageError("counts '" + text + "': more than " + std::to_string(max_entries) +
                       " nodes");
    }
    out.insert(out.end(), static_cast<size_t>(repeat), v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::optional<SlurmEnv> SlurmEnv::from_env(const std::map<std::string, std::string>& env) {
  auto get = [&](const char* k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
  auto job = get("SLURM_JOB_ID");
  if (!job) job = get("SLURM_JOBID");
  if (!job) return std::nullopt;
  SlurmEnv s;
  s.job_id = static_cast<uint64_t>(to_int("SLURM_JOB_ID", *job));
  if (auto v = get("SLURM_STEP_ID")) s.step_id = to_int("SLURM_STEP_ID", *v);
  if (auto v = get("SLURM_NODEID")) s.node_id = to_int("SLURM_NODEID", *v);
  auto nodelist = s.step_id ? get("SLURM_STEP_NODELIST") : std::nullopt;
  if (!nodelist) nodelist = get("SLURM_JOB_NODELIST");
  if (!nodelist) nodelist = get("SLURM_NODELIST");
  if (nodelist) s.nodes = expand_hostlist(*nodelist);
  auto num = s.step_id ? get("SLURM_STEP_NUM_NODES") : std::nullopt;
  if (!num) num = get("SLURM_JOB_NUM_NODES");
  if (!num) num = get("SLURM_NNODES");
  s.num_nodes = num ? to_int("SLURM_JOB_NUM_NODES", *num)
                    : static_cast<int>(std::max<size_t>(1, s.nodes.size()));
  if (auto v = get("SLURM_PROCID")) s.procid = to_int("SLURM_PROCID", *v);
  if (auto v = get("SLURM_LOCALID")) s.localid = to_int("SLURM_LOCALID", *v);
  if (auto v = get("SLURM_NTASKS")) s.ntasks = to_int("SLURM_NTASKS", *v);
  if (auto v = get("SLURM_NTASKS_PER_NODE"))
    s.ntasks_per_node = to_int("SLURM_NTASKS_PER_NODE", *v);
  if (auto v = get("SLURM_GPUS_ON_NODE")) s.gpus_on_node = to_int("SLURM_GPUS_ON_NODE", *v);
  if (auto v = get("SLURM_LAUNCH_NODE_IPADDR")) s.launch_node_ip = *v;
  return s;
}

std::string SlurmEnv::run_id() const {
  return "slurm-" + std::to_string(job_id) + "-" + (step_id ? std::to_string(*step_id) : "batch");
}

int SlurmEnv::derived_port() const {
  return 20000 + static_cast<int>(job_id % 40000);
}

std::string SlurmEnv::master_address() const {
  if (nodes.empty()) {
    if (!launch_node_ip.empty()) return launch_node_ip;
    throw UsageError("SLURM_JOB_NODELIST is not set; pass --master-addr");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(nodes.front().c_str(), nullptr, &hints, &res) == 0 && res != nullptr) {
    char buf[NI_MAXHOST];
    int rc =
        ::getnameinfo(res->ai_addr, res->ai_addrlen, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST);
    ::freeaddrinfo(res);
    if (rc == 0) return buf;
  }
  if (!launch_node_ip.empty()) return launch_node_ip;
  throw UsageError("cannot resolve '" + nodes.front() +
                   "', the first host of the job; pass --master-addr");
}

}  // namespace cohort::slurm
