// Stand-alone driver for the fuzz targets of tests/fuzz, for compilers without
// libFuzzer (g++): the same LLVMFuzzerTestOneInput a libFuzzer build links,
// driven by seed replay plus random mutation, without coverage feedback.
//
//   fuzz_TARGET [--runs N] [--seconds S] [--seed K] [--max-len BYTES]
//               [--dict FILE] [--artifact-prefix P] [--timeout S] CORPUS...
//
// Every file of the CORPUS directories (or CORPUS files) runs first, as it is;
// then up to N mutants of them (bit flips, byte runs, interesting integers,
// dictionary tokens, splices, truncation), stopping after S seconds. Each input
// is written to P + "crash-<hash>" the moment a sanitizer report, a fatal
// signal or the timeout ends the process, so the failure can be replayed:
// `fuzz_TARGET P/crash-<hash>`. The exit status is 0 when every input ran.
//
// The mutations depend only on --seed and the corpus, so a CI run is
// reproducible; the slow tier (scripts/fuzz.sh) runs the libFuzzer builds.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);
extern "C" __attribute__((weak)) void __sanitizer_set_death_callback(void (*callback)(void));
// A target's own mutator (structure-aware, tests/fuzz/proto_mutator.h), as libFuzzer calls it.
extern "C" __attribute__((weak)) size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                                                unsigned int seed);

namespace {

namespace fs = std::filesystem;

// The input now running, for the death paths (they may only use write/open).
const uint8_t* g_data = nullptr;
size_t g_size = 0;
char g_artifact[4096] = "./crash-current";

uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void WriteArtifact() {
  const int fd = ::open(g_artifact, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  size_t done = 0;
  while (done < g_size) {
    const ssize_t w = ::write(fd, g_data + done, g_size - done);
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
  ::close(fd);
  static const char kMsg[] = "\nfuzz driver: the input that failed is in ";
  (void)!::write(2, kMsg, sizeof(kMsg) - 1);
  (void)!::write(2, g_artifact, std::strlen(g_artifact));
  (void)!::write(2, "\n", 1);
}

void OnFatalSignal(int sig) {
  WriteArtifact();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void OnTimeout(int) {
  static const char kMsg[] = "\nfuzz driver: an input ran past --timeout\n";
  (void)!::write(2, kMsg, sizeof(kMsg) - 1);
  WriteArtifact();
  ::_exit(70);
}

// Tokens in libFuzzer's dictionary format: one "..." per line, \xNN and \" escapes.
std::vector<std::string> ReadDictionary(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  if (!in) {
    std::cerr << "fuzz driver: cannot read dictionary " << path << "\n";
    std::exit(2);
  }
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find('"'), b = line.rfind('"');
    if (a == std::string::npos || b <= a || line[0] == '#') continue;
    std::string tok;
    for (size_t i = a + 1; i < b; ++i) {
      if (line[i] == '\\' && i + 1 < b) {
        if (line[i + 1] == 'x' && i + 3 < b && std::isxdigit(static_cast<unsigned char>(line[i + 2])) &&
            std::isxdigit(static_cast<unsigned char>(line[i + 3]))) {
          tok.push_back(static_cast<char>(std::stoi(line.substr(i + 2, 2), nullptr, 16)));
          i += 3;
        } else {
          tok.push_back(line[++i]);
        }
      } else {
        tok.push_back(line[i]);
      }
    }
    if (!tok.empty()) out.push_back(tok);
  }
  return out;
}

class Mutator {
 public:
  Mutator(uint64_t seed, size_t max_len, std::vector<std::string> dict)
      : rng_(seed), max_len_(max_len), dict_(std::move(dict)) {}

  std::string Mutate(const std::string& base, const std::vector<std::string>& corpus) {
    std::string s = base;
    const int steps = 1 + static_cast<int>(Below(4));
    for (int i = 0; i < steps; ++i) Step(s, corpus);
    if (s.size() > max_len_) s.resize(max_len_);
    return s;
  }

 private:
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  size_t Pos(const std::string& s) { return static_cast<size_t>(Below(s.size() + 1)); }

  void Step(std::string& s, const std::vector<std::string>& corpus) {
    static const uint64_t kInteresting[] = {0,
                                            1,
                                            0x7f,
                                            0x80,
                                            0xff,
                                            0x7fff,
                                            0x8000,
                                            0xffff,
                                            0x7fffffff,
                                            0x80000000,
                                            0xffffffff,
                                            0x100000000,
                                            0x7fffffffffffffffull,
                                            ~0ull};
    switch (Below(dict_.empty() ? 9 : 11)) {
      case 0:  // flip a bit
        if (!s.empty()) s[Below(s.size())] ^= static_cast<char>(1u << Below(8));
        break;
      case 1:  // a random byte
        if (!s.empty()) s[Below(s.size())] = static_cast<char>(Below(256));
        break;
      case 2: {  // an interesting integer, 1/2/4/8 bytes little-endian
        const uint64_t v = kInteresting[Below(std::size(kInteresting))];
        const size_t w = size_t{1} << Below(4);
        if (s.size() < w) break;
        const size_t at = Below(s.size() - w + 1);
        for (size_t k = 0; k < w; ++k) s[at + k] = static_cast<char>((v >> (8 * k)) & 0xff);
        break;
      }
      case 3: {  // insert random bytes
        const size_t n = 1 + Below(8);
        std::string ins;
        for (size_t k = 0; k < n; ++k) ins.push_back(static_cast<char>(Below(256)));
        s.insert(Pos(s), ins);
        break;
      }
      case 4: {  // erase a range
        if (s.empty()) break;
        const size_t at = Below(s.size());
        s.erase(at, 1 + Below(std::min<size_t>(64, s.size() - at)));
        break;
      }
      case 5: {  // duplicate a range
        if (s.empty()) break;
        const size_t at = Below(s.size());
        const std::string piece = s.substr(at, 1 + Below(std::min<size_t>(64, s.size() - at)));
        s.insert(Pos(s), piece);
        break;
      }
      case 6:  // truncate
        s.resize(Below(s.size() + 1));
        break;
      case 7: {  // splice with another corpus entry
        if (corpus.empty()) break;
        const std::string& other = corpus[Below(corpus.size())];
        const size_t cut = Pos(s), from = Below(other.size() + 1);
        s = s.substr(0, cut) + other.substr(from);
        break;
      }
      case 8: {  // a digit run: numbers in text formats
        static const char* kNumbers[] = {
            "0",     "-1",  "1",          "2147483648", "-9223372036854775808", "18446744073709551615",
            "1e309", "nan", "4294967296", "65536"};
        const std::string tok = kNumbers[Below(std::size(kNumbers))];
        s.insert(Pos(s), tok);
        break;
      }
      case 9:  // insert a dictionary token
        s.insert(Pos(s), dict_[Below(dict_.size())]);
        break;
      case 10: {  // overwrite with a dictionary token
        const std::string& tok = dict_[Below(dict_.size())];
        if (s.size() < tok.size()) break;
        s.replace(Below(s.size() - tok.size() + 1), tok.size(), tok);
        break;
      }
    }
  }

  std::mt19937_64 rng_;
  size_t max_len_;
  std::vector<std::string> dict_;
};

Mutator* g_mutator = nullptr;

[[noreturn]] void Usage(const char* argv0, const std::string& why) {
  std::cerr << argv0 << ": " << why << "\nusage: " << argv0
            << " [--runs N] [--seconds S] [--seed K] [--max-len BYTES] [--dict FILE] [--artifact-prefix P]"
               " [--timeout S] CORPUS_DIR_OR_FILE...\n";
  std::exit(2);
}

}  // namespace

// libFuzzer's byte-level mutator, for custom mutators: here the driver's.
extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size) {
  std::string s(reinterpret_cast<const char*>(data), size);
  s = g_mutator->Mutate(s, {});
  const size_t n = std::min(s.size(), max_size);
  std::memcpy(data, s.data(), n);
  return n;
}

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  uint64_t runs = 0, seed = 1;
  double seconds = 0;
  size_t max_len = 1 << 20;
  unsigned timeout = 60;
  std::string dict_path, prefix = "./";
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(argv[0], a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--runs")
        runs = std::stoull(value());
      else if (a == "--seconds")
        seconds = std::stod(value());
      else if (a == "--seed")
        seed = std::stoull(value());
      else if (a == "--max-len")
        max_len = std::stoull(value());
      else if (a == "--timeout")
        timeout = static_cast<unsigned>(std::stoul(value()));
      else if (a == "--dict")
        dict_path = value();
      else if (a == "--artifact-prefix")
        prefix = value();
      else if (a.rfind("--", 0) == 0)
        Usage(argv[0], "unknown option " + a);
      else
        inputs.push_back(a);
    } catch (const std::logic_error&) {
      Usage(argv[0], "bad number for " + a);
    }
  }
  if (inputs.empty()) Usage(argv[0], "no corpus given");

  std::vector<std::pair<std::string, std::string>> corpus;  // (name, bytes)
  for (const std::string& in : inputs) {
    std::error_code ec;
    std::vector<fs::path> files;
    if (fs::is_directory(in, ec)) {
      for (const auto& e : fs::directory_iterator(in))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
    } else if (fs::is_regular_file(in, ec)) {
      files.push_back(in);
    } else {
      Usage(argv[0], "no such corpus file or directory: " + in);
    }
    for (const fs::path& f : files) {
      std::ifstream is(f, std::ios::binary);
      std::ostringstream ss;
      ss << is.rdbuf();
      corpus.emplace_back(f.string(), ss.str().substr(0, max_len));
    }
  }

  // Under a sanitizer its own handlers report SIGSEGV & co. and then call back;
  // an abort (an uncaught exception, a failed check) is ours to catch either way.
  if (__sanitizer_set_death_callback) {
    __sanitizer_set_death_callback(WriteArtifact);
  } else {
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::signal(sig, OnFatalSignal);
  }
  ::signal(SIGABRT, OnFatalSignal);
  ::signal(SIGALRM, OnTimeout);

  auto run_one = [&](const std::string& bytes) {
    g_data = reinterpret_cast<const uint8_t*>(bytes.data());
    g_size = bytes.size();
    std::snprintf(g_artifact, sizeof(g_artifact), "%scrash-%016llx", prefix.c_str(),
                  static_cast<unsigned long long>(Fnv1a(g_data, g_size)));
    ::alarm(timeout);
    // A copy of exactly `size` bytes, so reading past the end is a sanitizer report.
    std::vector<uint8_t> exact(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(exact.data(), exact.size());
    ::alarm(0);
  };

  const auto start = std::chrono::steady_clock::now();
  for (const auto& [name, bytes] : corpus) run_one(bytes);
  std::cerr << "fuzz driver: " << corpus.size() << " corpus inputs ran\n";

  std::vector<std::string> pool;
  for (const auto& c : corpus) pool.push_back(c.second);
  if (pool.empty()) pool.emplace_back();
  Mutator mutator(seed, max_len, dict_path.empty() ? std::vector<std::string>{} : ReadDictionary(dict_path));
  g_mutator = &mutator;
  uint64_t done = 0;
  std::mt19937_64 pick(seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<uint8_t> buf;
  while (done < runs) {
    if (seconds > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) break;
    const std::string& base = pool[pick() % pool.size()];
    if (LLVMFuzzerCustomMutator) {
      // Chains of up to 4 structure-aware steps from a seed, as libFuzzer's mutation depth.
      buf.assign(base.begin(), base.end());
      buf.resize(std::max(max_len, base.size()));
      size_t n = base.size();
      const int depth = 1 + static_cast<int>(pick() % 4);
      for (int k = 0; k < depth; ++k)
        n = LLVMFuzzerCustomMutator(buf.data(), n, buf.size(), static_cast<unsigned>(pick()));
      run_one(std::string(reinterpret_cast<const char*>(buf.data()), n));
    } else {
      run_one(mutator.Mutate(base, pool));
    }
    ++done;
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "fuzz driver: " << done << " mutated inputs ran (seed " << seed << "), " << took << " s, no failure\n";
  return 0;
}
