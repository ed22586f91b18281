// The disk cache of compiled OpenCL programs (program_cache.cpp). Damaged, swapped, foreign or
// unreachable cache files must never reach the driver nor fail a build: after each kind of damage
// the next build_program must give a program that computes the right values, and, where the
// directory is writable, leave a valid entry that the build after it reads without rewriting.
//
// build_program is called directly: the backend's in-memory kernel map would hide the disk cache
// after the first build in a process. Entries are told apart by inode: rename() puts a new inode
// in place, so an unchanged inode means the entry was read, a new one that it was rewritten.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "opencl/cl_api.hpp"
#include "opencl/program_cache.hpp"
#include "portmat/portmat.hpp"

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

// Every work-item writes i * SCALE + OFFSET: a binary built with other options gives other values.
const char kSource[] =
    "__kernel void f(__global int* out) { int i = get_global_id(0); out[i] = i * SCALE + OFFSET; }";
constexpr int kItems = 64;

// The entry layout documented in program_cache.hpp, read independently of program_cache.cpp.
constexpr std::size_t kHeader = 32;

std::uint64_t le(const Bytes& b, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t(b[at + i]) << (8 * i);
  return v;
}

void set_le(Bytes& b, std::size_t at, int bytes, std::uint64_t v) {
  for (int i = 0; i < bytes; ++i) b[at + i] = static_cast<unsigned char>(v >> (8 * i));
}

std::uint64_t fnv1a(const unsigned char* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

Bytes read_bytes(const fs::path& p) {
  Bytes b;
  if (FILE* f = std::fopen(p.c_str(), "rb")) {
    unsigned char chunk[4096];
    for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, f)) > 0;)
      b.insert(b.end(), chunk, chunk + n);
    std::fclose(f);
  }
  return b;
}

// Rewrites the file in place (same inode), as damage on disk would.
void write_bytes(const fs::path& p, const Bytes& b) {
  FILE* f = std::fopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr) << p;
  // An empty vector's data() may be null, which fwrite must not get even for 0 bytes (UBSan).
  if (!b.empty()) ASSERT_EQ(std::fwrite(b.data(), 1, b.size(), f), b.size());
  ASSERT_EQ(std::fclose(f), 0);
}

ino_t inode(const fs::path& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
}

std::string options(int scale, int offset) {
  return "-DSCALE=" + std::to_string(scale) + " -DOFFSET=" + std::to_string(offset);
}

// "" if `p` holds a whole, undamaged entry built with `opts`; else what is wrong with it.
std::string entry_problem(const fs::path& p, const std::string& opts) {
  const Bytes b = read_bytes(p);
  if (b.size() < kHeader) return "shorter than a header";
  if (std::memcmp(b.data(), "PMCLPRG\0", 8) != 0) return "bad magic";
  if (le(b, 8, 4) != 2) return "bad version";
  const std::uint64_t key = le(b, 12, 4), payload = le(b, 16, 8);
  if (payload == 0 || b.size() != kHeader + key + payload) return "bad lengths";
  if (fnv1a(b.data() + kHeader + key, payload) != le(b, 24, 8)) return "bad checksum";
  const std::string k(b.begin() + kHeader, b.begin() + kHeader + key);
  if (k.find("\noptions " + std::to_string(opts.size()) + " " + opts + "\n") == std::string::npos)
    return "key without the options: " + k;
  return "";
}

class ProgramCache : public ::testing::Test {
 protected:
  void SetUp() override {
    cl_ = portmat::opencl::cl_api();
    if (!cl_) GTEST_SKIP() << "no OpenCL loader";
    cl_platform_id platform;
    cl_uint n = 0;
    if (cl_->GetPlatformIDs(1, &platform, &n) != CL_SUCCESS || n == 0 ||
        cl_->GetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &dev_, nullptr) != CL_SUCCESS)
      GTEST_SKIP() << "no OpenCL device";
    cl_int err;
    ctx_ = cl_->CreateContext(nullptr, 1, &dev_, nullptr, nullptr, &err);
    ASSERT_EQ(err, CL_SUCCESS);
    queue_ = cl_->CreateCommandQueue(ctx_, dev_, 0, &err);
    ASSERT_EQ(err, CL_SUCCESS);
    if (const char* old = std::getenv("PORTMAT_CACHE_DIR")) saved_env_ = old;
    std::string tmpl = (fs::temp_directory_path() / "portmat-cache-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    dir_ = root_ / "cache";
    use_dir(dir_);
  }

  void TearDown() override {
    if (saved_env_)
      ::setenv("PORTMAT_CACHE_DIR", saved_env_->c_str(), 1);
    else
      ::unsetenv("PORTMAT_CACHE_DIR");
    if (!root_.empty()) {
      std::error_code ec;
      for (auto it = fs::recursive_directory_iterator(root_, ec); !ec && it != fs::end(it);
           it.increment(ec))
        if (it->is_directory(ec))
          fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
      fs::remove_all(root_, ec);
    }
    if (queue_) cl_->ReleaseCommandQueue(queue_);
    if (ctx_) cl_->ReleaseContext(ctx_);
  }

  void use_dir(const fs::path& d) { ::setenv("PORTMAT_CACHE_DIR", d.c_str(), 1); }

  // build_program with (scale, offset), then runs the kernel and checks every value.
  void build_and_check(int scale, int offset) {
    cl_program prog = portmat::opencl::build_program(*cl_, ctx_, dev_, "test device", kSource,
                                                     options(scale, offset));
    ASSERT_NE(prog, nullptr);
    cl_int err;
    cl_kernel k = cl_->CreateKernel(prog, "f", &err);
    cl_->ReleaseProgram(prog);
    ASSERT_EQ(err, CL_SUCCESS);
    cl_mem buf = cl_->CreateBuffer(ctx_, CL_MEM_READ_WRITE, kItems * sizeof(int), nullptr, &err);
    ASSERT_EQ(err, CL_SUCCESS);
    std::vector<int> out(kItems, -12345);
    const std::size_t global = kItems;
    EXPECT_EQ(cl_->SetKernelArg(k, 0, sizeof buf, &buf), CL_SUCCESS);
    EXPECT_EQ(
        cl_->EnqueueNDRangeKernel(queue_, k, 1, nullptr, &global, nullptr, 0, nullptr, nullptr),
        CL_SUCCESS);
    EXPECT_EQ(cl_->EnqueueReadBuffer(queue_, buf, CL_TRUE, 0, kItems * sizeof(int), out.data(), 0,
                                     nullptr, nullptr),
              CL_SUCCESS);
    cl_->ReleaseMemObject(buf);
    cl_->ReleaseKernel(k);
    for (int i = 0; i < kItems; ++i)
      ASSERT_EQ(out[i], i * scale + offset) << "item " << i << " with " << options(scale, offset);
  }

  // Entries and leftovers in `d`.
  static std::vector<fs::path> files(const fs::path& d, const std::string& suffix = ".bin") {
    std::vector<fs::path> v;
    std::error_code ec;
    for (auto it = fs::directory_iterator(d, ec); !ec && it != fs::end(it); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.size() >= suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        v.push_back(it->path());
    }
    return v;
  }
  static std::vector<fs::path> temp_files(const fs::path& d) {
    std::vector<fs::path> v;
    std::error_code ec;
    for (auto it = fs::directory_iterator(d, ec); !ec && it != fs::end(it); it.increment(ec))
      if (it->path().filename().string().find(".tmp") != std::string::npos) v.push_back(it->path());
    return v;
  }

  // A fresh, valid entry for (scale, offset) in dir_, read back without rewriting; its path.
  fs::path make_entry(int scale, int offset) {
    const auto before = files(dir_);
    build_and_check(scale, offset);
    fs::path entry;
    for (const auto& p : files(dir_))
      if (std::find(before.begin(), before.end(), p) == before.end()) entry = p;
    if (entry.empty()) {  // already there: the one whose key has these options
      for (const auto& p : files(dir_))
        if (entry_problem(p, options(scale, offset)).empty()) entry = p;
    }
    EXPECT_FALSE(entry.empty()) << "no entry was written";
    if (entry.empty()) return entry;
    EXPECT_EQ(entry.filename().string().rfind("opencl-v2-", 0), 0u) << entry;
    EXPECT_EQ(entry_problem(entry, options(scale, offset)), "");
    expect_read_not_rewritten(entry, scale, offset);
    return entry;
  }

  void expect_read_not_rewritten(const fs::path& entry, int scale, int offset) {
    const ino_t ino = inode(entry);
    const Bytes bytes = read_bytes(entry);
    build_and_check(scale, offset);
    EXPECT_EQ(inode(entry), ino) << "a valid entry was rewritten instead of read";
    EXPECT_EQ(read_bytes(entry), bytes);
  }

  // The next build after the damage works, rewrites the entry, and the rewritten entry is valid
  // and read back by the build after that.
  void expect_repaired(const fs::path& entry, int scale, int offset) {
    const ino_t damaged = inode(entry);
    build_and_check(scale, offset);
    EXPECT_NE(inode(entry), damaged) << "the damaged entry was not rewritten (was it used?)";
    EXPECT_EQ(entry_problem(entry, options(scale, offset)), "");
    expect_read_not_rewritten(entry, scale, offset);
    EXPECT_TRUE(temp_files(entry.parent_path()).empty());
  }

  // For each damage: a valid entry, damaged by `damage`, then repaired by the next build.
  void check_damage(const std::string& what, const std::function<void(Bytes&)>& damage) {
    SCOPED_TRACE(what);
    const fs::path entry = make_entry(1, 0);
    ASSERT_FALSE(entry.empty());
    Bytes b = read_bytes(entry);
    damage(b);
    write_bytes(entry, b);
    expect_repaired(entry, 1, 0);
  }

  const portmat::opencl::ClApi* cl_ = nullptr;
  cl_device_id dev_ = nullptr;
  cl_context ctx_ = nullptr;
  cl_command_queue queue_ = nullptr;
  std::optional<std::string> saved_env_;
  fs::path root_, dir_;
};

TEST_F(ProgramCache, AnEntryIsWrittenOnceAndReadByLaterBuilds) {
  const fs::path entry = make_entry(3, 7);
  ASSERT_FALSE(entry.empty());
  EXPECT_EQ(files(dir_).size(), 1u);
  const fs::path other = make_entry(5, -2);  // other options: another entry
  EXPECT_NE(other, entry);
  EXPECT_EQ(files(dir_).size(), 2u);
  EXPECT_TRUE(temp_files(dir_).empty());
}

TEST_F(ProgramCache, OffWritesNothing) {
  ::setenv("PORTMAT_CACHE_DIR", "off", 1);
  const fs::path cwd = fs::current_path();
  fs::current_path(root_);  // a relative "off" directory would appear here
  build_and_check(1, 0);
  fs::current_path(cwd);
  EXPECT_FALSE(fs::exists(root_ / "off"));
  EXPECT_FALSE(fs::exists(dir_));
}

TEST_F(ProgramCache, TruncatedEntriesAreRebuilt) {
  const fs::path probe = make_entry(1, 0);
  ASSERT_FALSE(probe.empty());
  const Bytes whole = read_bytes(probe);
  const std::size_t key = le(whole, 12, 4), size = whole.size();
  ASSERT_GT(size, kHeader + key + 2);
  for (std::size_t len :
       {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(8), kHeader / 2, kHeader - 1,
        kHeader, kHeader + key / 2, kHeader + key - 1, kHeader + key, kHeader + key + 1,
        kHeader + key + (size - kHeader - key) / 2, size - 1})
    check_damage("truncated to " + std::to_string(len) + " of " + std::to_string(size) + " bytes",
                 [len](Bytes& b) { b.resize(len); });
  check_damage("one byte appended", [](Bytes& b) { b.push_back(0); });
  check_damage("its own copy appended", [](Bytes& b) { b.insert(b.end(), b.begin(), b.end()); });
}

TEST_F(ProgramCache, FlippedBytesAreRebuilt) {
  const fs::path probe = make_entry(1, 0);
  ASSERT_FALSE(probe.empty());
  const Bytes whole = read_bytes(probe);
  const std::size_t key = le(whole, 12, 4), size = whole.size();
  for (std::size_t at : {kHeader + key, kHeader + key + (size - kHeader - key) / 2, size - 1})
    check_damage("payload byte " + std::to_string(at) + " flipped",
                 [at](Bytes& b) { b[at] ^= 0x01; });
  for (std::size_t at : {kHeader, kHeader + key / 2, kHeader + key - 1})
    check_damage("key byte " + std::to_string(at) + " flipped", [at](Bytes& b) { b[at] ^= 0x20; });
  check_damage("all payload bytes zeroed",
               [key](Bytes& b) { std::fill(b.begin() + kHeader + key, b.end(), 0); });
}

TEST_F(ProgramCache, AlteredHeaderFieldsAreRebuilt) {
  check_damage("magic", [](Bytes& b) { b[0] = 'X'; });
  check_damage("magic's last byte", [](Bytes& b) { b[7] = '1'; });
  check_damage("version 1", [](Bytes& b) { set_le(b, 8, 4, 1); });
  check_damage("version 3", [](Bytes& b) { set_le(b, 8, 4, 3); });
  check_damage("version byte 3", [](Bytes& b) { b[11] ^= 0x80; });
  check_damage("key length + 1", [](Bytes& b) { set_le(b, 12, 4, le(b, 12, 4) + 1); });
  check_damage("key length - 1", [](Bytes& b) { set_le(b, 12, 4, le(b, 12, 4) - 1); });
  check_damage("key length 0", [](Bytes& b) { set_le(b, 12, 4, 0); });
  check_damage("key length 2^32 - 1", [](Bytes& b) { set_le(b, 12, 4, 0xffffffffu); });
  check_damage("payload length + 1", [](Bytes& b) { set_le(b, 16, 8, le(b, 16, 8) + 1); });
  check_damage("payload length - 1", [](Bytes& b) { set_le(b, 16, 8, le(b, 16, 8) - 1); });
  check_damage("payload length 0", [](Bytes& b) { set_le(b, 16, 8, 0); });
  check_damage("payload length 2^64 - 1", [](Bytes& b) { set_le(b, 16, 8, ~std::uint64_t(0)); });
  check_damage("payload length 2^63", [](Bytes& b) { set_le(b, 16, 8, std::uint64_t(1) << 63); });
  check_damage("key and payload lengths traded, sum kept", [](Bytes& b) {
    set_le(b, 12, 4, le(b, 12, 4) + 8);
    set_le(b, 16, 8, le(b, 16, 8) - 8);
  });
  check_damage("checksum + 1", [](Bytes& b) { set_le(b, 24, 8, le(b, 24, 8) + 1); });
  check_damage("checksum 0", [](Bytes& b) { set_le(b, 24, 8, 0); });
}

TEST_F(ProgramCache, SwappedEntriesAreRebuiltNotRun) {
  // The field bug: two files swapped gave a wrong product, then heap corruption. (1, 0) and (2, 0)
  // give keys of equal length, told apart only by their bytes; (3, 100) a key of another length.
  const fs::path a = make_entry(1, 0), b = make_entry(2, 0), c = make_entry(3, 100);
  ASSERT_FALSE(a.empty() || b.empty() || c.empty());
  auto swap = [this](const fs::path& x, const fs::path& y) {
    const fs::path t = dir_ / "swap";
    fs::rename(x, t);
    fs::rename(y, x);
    fs::rename(t, y);
  };
  swap(a, b);
  expect_repaired(a, 1, 0);
  expect_repaired(b, 2, 0);
  swap(a, c);
  expect_repaired(a, 1, 0);
  expect_repaired(c, 3, 100);
  // A copy, not a swap: both files then hold b's entry.
  fs::copy_file(b, a, fs::copy_options::overwrite_existing);
  expect_repaired(a, 1, 0);
  expect_read_not_rewritten(b, 2, 0);
}

TEST_F(ProgramCache, ForeignFilesAreRebuilt) {
  const fs::path probe = make_entry(1, 0);
  ASSERT_FALSE(probe.empty());
  const Bytes whole = read_bytes(probe);
  const std::size_t key = le(whole, 12, 4);
  const Bytes raw(whole.begin() + kHeader + key, whole.end());
  check_damage("old format: the bare driver binary", [&](Bytes& b) { b = raw; });
  std::mt19937 rng(12345);
  for (std::size_t n :
       {std::size_t(1), std::size_t(31), std::size_t(32), std::size_t(4096), whole.size()})
    check_damage("random garbage of " + std::to_string(n) + " bytes", [&rng, n](Bytes& b) {
      b.resize(n);
      for (auto& x : b) x = static_cast<unsigned char>(rng());
    });
  check_damage("garbage after a valid magic and version", [&rng](Bytes& b) {
    for (std::size_t i = 12; i < b.size(); ++i) b[i] = static_cast<unsigned char>(rng());
  });
  check_damage("an entry of another key with its own lengths and checksum", [key](Bytes& b) {
    // Consistent in itself; only the key (here: another driver version) differs.
    const std::string k(b.begin() + kHeader, b.begin() + kHeader + key);
    const std::size_t at = k.find("driver_version ");
    ASSERT_NE(at, std::string::npos) << k;
    const std::size_t value = k.find(' ', at + 15) + 1;
    b[kHeader + value] ^= 0x01;
  });
}

TEST_F(ProgramCache, ADirectoryInPlaceOfTheEntryIsLeftAlone) {
  const fs::path entry = make_entry(1, 0);
  ASSERT_FALSE(entry.empty());
  fs::remove(entry);
  fs::create_directory(entry);
  fs::create_directory(entry / "inside");
  build_and_check(1, 0);
  build_and_check(1, 0);
  EXPECT_TRUE(fs::is_directory(entry / "inside"));
  EXPECT_TRUE(temp_files(dir_).empty());
  fs::remove_all(entry);
  EXPECT_FALSE(make_entry(1, 0).empty());  // and the cache works again once it is gone
}

TEST_F(ProgramCache, UnwritableOrUncreatableDirectoriesGiveNoCacheButWork) {
  // /proc takes no new files or directories, even from root.
  use_dir("/proc");
  build_and_check(1, 0);
  build_and_check(1, 0);
  const fs::path missing = "/proc/portmat-no-such-dir/cache";
  use_dir(missing);
  build_and_check(1, 0);
  build_and_check(1, 0);
  EXPECT_FALSE(fs::exists(missing.parent_path()));
}

TEST_F(ProgramCache, AReadOnlyDirectoryIsReadButNotWritten) {
  const fs::path entry = make_entry(1, 0);
  ASSERT_FALSE(entry.empty());
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
  if (::access(dir_.c_str(), W_OK) == 0)
    GTEST_SKIP() << "running as root: no directory is read-only";
  expect_read_not_rewritten(entry, 1, 0);  // a valid entry is still used
  Bytes b = read_bytes(entry);
  b.resize(b.size() / 2);
  write_bytes(entry, b);  // the file itself stays writable
  build_and_check(1, 0);  // a damaged one still ignored
  EXPECT_EQ(read_bytes(entry), b);
  EXPECT_TRUE(temp_files(dir_).empty());
}

TEST_F(ProgramCache, MissingDirectoriesAreCreated) {
  const fs::path nested = root_ / "a" / "b" / "c";
  use_dir(nested);
  dir_ = nested;
  EXPECT_FALSE(make_entry(1, 0).empty());
}

TEST_F(ProgramCache, ARegularFileInPlaceOfTheDirectoryIsLeftAlone) {
  const fs::path file = root_ / "file";
  write_bytes(file, Bytes{'k', 'e', 'e', 'p'});
  for (const fs::path& d : {file, file / "below"}) {
    SCOPED_TRACE(d.string());
    use_dir(d);
    build_and_check(1, 0);
    build_and_check(1, 0);
    EXPECT_EQ(read_bytes(file), (Bytes{'k', 'e', 'e', 'p'}));
  }
  EXPECT_EQ(files(root_, "").size(), 1u);  // nothing written beside it either
}

TEST_F(ProgramCache, ConcurrentBuildsEachGetAWholeEntry) {
  // Threads building the same entry at once write their own temporary files.
  for (int round = 0; round < 2; ++round) {
    fs::remove_all(dir_);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([this, t] {
        try {
          build_and_check(1 + t % 2, 0);
        } catch (const std::exception& e) {
          ADD_FAILURE() << e.what();
        }
      });
    for (auto& th : threads) th.join();
    const auto entries = files(dir_);
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_TRUE(temp_files(dir_).empty());
    for (const auto& e : entries) {
      const bool one = entry_problem(e, options(1, 0)).empty();
      EXPECT_EQ(entry_problem(e, options(one ? 1 : 2, 0)), "") << e;
      expect_read_not_rewritten(e, one ? 1 : 2, 0);
    }
  }
}

// ---- the entry file alone: no driver needed --------------------------------------------------

using portmat::opencl::program_cache_detail::read_entry;
using portmat::opencl::program_cache_detail::write_entry;

class ProgramCacheFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "portmat-cache-file-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = (dir_ / "opencl-v2-0123456789abcdef.bin").string();
    std::mt19937 rng(7);
    payload_.resize(100000);
    for (auto& x : payload_) x = static_cast<unsigned char>(rng());
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::size_t temp_files() const {
    std::size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir_))
      n += e.path().filename().string().find(".tmp") != std::string::npos;
    return n;
  }

  fs::path dir_;
  std::string path_;
  const std::string key_ = "platform 4 PoCL\noptions 7 -DA=1 B\n";
  Bytes payload_;
};

TEST_F(ProgramCacheFile, RoundTripsAndMatchesTheDocumentedLayout) {
  ASSERT_TRUE(write_entry(path_, key_, payload_));
  EXPECT_EQ(read_entry(path_, key_), payload_);
  const Bytes b = read_bytes(path_);
  ASSERT_EQ(b.size(), kHeader + key_.size() + payload_.size());
  EXPECT_EQ(std::memcmp(b.data(), "PMCLPRG\0", 8), 0);
  EXPECT_EQ(le(b, 8, 4), 2u);
  EXPECT_EQ(le(b, 12, 4), key_.size());
  EXPECT_EQ(le(b, 16, 8), payload_.size());
  EXPECT_EQ(le(b, 24, 8), fnv1a(payload_.data(), payload_.size()));
  EXPECT_EQ(std::string(b.begin() + kHeader, b.begin() + kHeader + key_.size()), key_);
  EXPECT_EQ(temp_files(), 0u);
  EXPECT_TRUE(read_entry(path_, key_ + " ").empty());
  EXPECT_TRUE(read_entry(path_, key_.substr(1)).empty());
  EXPECT_TRUE(read_entry(path_ + ".missing", key_).empty());
}

TEST_F(ProgramCacheFile, EveryTruncationAndEveryHeaderOrKeyBitFlipIsRejected) {
  ASSERT_TRUE(write_entry(path_, key_, payload_));
  const Bytes whole = read_bytes(path_);
  for (std::size_t len = 0; len < kHeader + key_.size() + 64; ++len) {
    write_bytes(path_, Bytes(whole.begin(), whole.begin() + len));
    EXPECT_TRUE(read_entry(path_, key_).empty()) << "truncated to " << len;
  }
  for (std::size_t len = whole.size() - 64; len < whole.size(); ++len) {
    write_bytes(path_, Bytes(whole.begin(), whole.begin() + len));
    EXPECT_TRUE(read_entry(path_, key_).empty()) << "truncated to " << len;
  }
  for (std::size_t at = 0; at < kHeader + key_.size(); ++at)
    for (int bit = 0; bit < 8; ++bit) {
      Bytes b = whole;
      b[at] ^= static_cast<unsigned char>(1 << bit);
      write_bytes(path_, b);
      EXPECT_TRUE(read_entry(path_, key_).empty()) << "byte " << at << " bit " << bit;
    }
  std::mt19937 rng(11);
  for (int i = 0; i < 200; ++i) {
    Bytes b = whole;
    const std::size_t at = kHeader + key_.size() + rng() % payload_.size();
    b[at] ^= static_cast<unsigned char>(1 << (rng() % 8));
    write_bytes(path_, b);
    EXPECT_TRUE(read_entry(path_, key_).empty()) << "payload byte " << at;
  }
  write_bytes(path_, whole);
  EXPECT_EQ(read_entry(path_, key_), payload_);
}

// A file-size limit makes writes fail part-way, as a full disk does (EFBIG rather than ENOSPC).
// Tested on write_entry alone: drivers write files of their own while compiling (PoCL aborts).
TEST_F(ProgramCacheFile, AFullDiskLeavesNoTemporaryFileAndTheOldEntryIntact) {
  const Bytes old(payload_.begin(), payload_.begin() + 1000);
  ASSERT_TRUE(write_entry(path_, key_, old));
  struct sigaction ignore = {}, old_action = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &old_action), 0);
  rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const std::size_t whole = kHeader + key_.size() + payload_.size();
  for (bool with_old_entry : {true, false}) {
    if (!with_old_entry) fs::remove(path_);
    for (rlim_t limit : {rlim_t(0), rlim_t(kHeader / 2), rlim_t(kHeader + key_.size() + 1),
                         rlim_t(whole / 2), rlim_t(whole - 1)}) {
      SCOPED_TRACE("file size limit " + std::to_string(limit));
      rlimit l = old_limit;
      l.rlim_cur = limit;
      ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &l), 0);
      const bool written = write_entry(path_, key_, payload_);
      ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
      EXPECT_FALSE(written);
      EXPECT_EQ(temp_files(), 0u);
      if (with_old_entry)
        EXPECT_EQ(read_entry(path_, key_), old);
      else
        EXPECT_FALSE(fs::exists(path_));
    }
  }
  ::sigaction(SIGXFSZ, &old_action, nullptr);
  EXPECT_TRUE(write_entry(path_, key_, payload_));
  EXPECT_EQ(read_entry(path_, key_), payload_);
}

TEST_F(ProgramCacheFile, UnwritablePlacesAreRefusedQuietly) {
  write_bytes(dir_ / "file", Bytes{'x'});
  for (const fs::path& p :
       {dir_ / "file" / "entry.bin", dir_ / "missing" / "entry.bin", fs::path("/proc/entry.bin")})
    EXPECT_FALSE(write_entry(p.string(), key_, payload_)) << p;
  fs::create_directory(path_);
  EXPECT_FALSE(write_entry(path_, key_, payload_));  // rename() will not replace a directory
  EXPECT_TRUE(read_entry(path_, key_).empty());
  EXPECT_TRUE(fs::is_directory(path_));
  EXPECT_EQ(temp_files(), 0u);
}

}  // namespace
