#include "common/cpu_budget.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "ringloader/ringloader.h"
#include "absl/strings/str_cat.h"
#include "testing/jpeg_fixtures.h"
#include "testing/simulated_device.h"
#include "pipeline/loader_factory.h"

namespace ringloader {
namespace {

using testing::MakeTempDir;
using testing::WriteText;

void MakeDir(const std::string& path) {
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p '", path, "'").c_str()), 0);
}

struct FakeCgroup {
  std::string root;       // the cgroup mount
  std::string proc_file;  // stands in for /proc/self/cgroup
};

FakeCgroup V2(const std::string& path) {
  FakeCgroup f{MakeTempDir() + "/cgroup", ""};
  f.proc_file = f.root + "-proc-self-cgroup";
  WriteText(f.proc_file, absl::StrCat("0::", path, "\n"));
  MakeDir(f.root + path);
  return f;
}

TEST(CpuQuotaTest, V2QuotaOfTheProcessCgroup) {
  FakeCgroup f = V2("/kubepods/pod1/ctr");
  WriteText(f.root + "/kubepods/pod1/ctr/cpu.max", "150000 100000\n");
  absl::StatusOr<CpuQuota> q = ReadCpuQuota(f.root, f.proc_file);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_DOUBLE_EQ(q->cpus, 1.5);
  EXPECT_EQ(q->source, "cgroup v2 /kubepods/pod1/ctr cpu.max");
}

TEST(CpuQuotaTest, V2UnlimitedIsNoQuota) {
  FakeCgroup f = V2("/user.slice/session-1.scope");
  WriteText(f.root + "/user.slice/session-1.scope/cpu.max", "max 100000\n");
  absl::StatusOr<CpuQuota> q = ReadCpuQuota(f.root, f.proc_file);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->cpus, 0);
}

TEST(CpuQuotaTest, V2SmallestQuotaOnThePathWinsAndNestedParentsBind) {
  FakeCgroup f = V2("/a/b/c");
  WriteText(f.root + "/a/cpu.max", "200000 100000\n");      // 2 CPUs for a and below
  WriteText(f.root + "/a/b/cpu.max", "max 100000\n");       // b: no limit of its own
  WriteText(f.root + "/a/b/c/cpu.max", "600000 100000\n");  // c asks for 6: its parent binds
  absl::StatusOr<CpuQuota> q = ReadCpuQuota(f.root, f.proc_file);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_DOUBLE_EQ(q->cpus, 2.0);
  EXPECT_EQ(q->source, "cgroup v2 /a cpu.max");
}

TEST(CpuQuotaTest, V2ContainerSeesHostPathButMountRootIsItsCgroup) {
  // No cgroup namespace: /proc/self/cgroup names a path that does not exist under the mount,
  // whose root is the container's own cgroup.
  FakeCgroup f{MakeTempDir() + "/cgroup", ""};
  f.proc_file = f.root + "-proc";
  WriteText(f.proc_file, "0::/system.slice/docker-abc.scope\n");
  WriteText(f.root + "/cpu.max", "100000 100000\n");
  absl::StatusOr<CpuQuota> q = ReadCpuQuota(f.root, f.proc_file);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_DOUBLE_EQ(q->cpus, 1.0);
  EXPECT_EQ(q->source, "cgroup v2 / cpu.max");
}

TEST(CpuQuotaTest, V1CpuControllerHierarchy) {
  FakeCgroup f{MakeTempDir() + "/cgroup", ""};
  f.proc_file = f.root + "-proc";
  WriteText(f.proc_file,
            "12:memory:/docker/abc\n"
            "4:cpu,cpuacct:/docker/abc\n"
            "1:name=systemd:/docker/abc\n"
            "0::/docker/abc\n");  // a hybrid system: v1 holds the cpu controller
  WriteText(f.root + "/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n");
  WriteText(f.root + "/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  WriteText(f.root + "/cpu,cpuacct/docker/cpu.cfs_quota_us", "-1\n");
  WriteText(f.root + "/cpu,cpuacct/docker/cpu.cfs_period_us", "100000\n");
  absl::StatusOr<CpuQuota> q = ReadCpuQuota(f.root, f.proc_file);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_DOUBLE_EQ(q->cpus, 2.5);
  EXPECT_EQ(q->source, "cgroup v1 /docker/abc cpu.cfs_quota_us");
}

TEST(CpuQuotaTest, V1UnlimitedAndMissingTreesAreNoQuota) {
  FakeCgroup f{MakeTempDir() + "/cgroup", ""};
  f.proc_file = f.root + "-proc";
  WriteText(f.proc_file, "3:cpu:/\n");
  WriteText(f.root + "/cpu/cpu.cfs_quota_us", "-1\n");
  WriteText(f.root + "/cpu/cpu.cfs_period_us", "100000\n");
  absl::StatusOr<CpuQuota> q = ReadCpuQuota(f.root, f.proc_file);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->cpus, 0);
  // No /proc/self/cgroup at all (not Linux, or a sandbox): no quota, not an error.
  q = ReadCpuQuota(f.root, f.root + "/does-not-exist");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->cpus, 0);
}

TEST(CpuQuotaTest, MalformedQuotaNamesTheFile) {
  FakeCgroup f = V2("/x");
  WriteText(f.root + "/x/cpu.max", "lots\n");
  absl::StatusOr<CpuQuota> q = ReadCpuQuota(f.root, f.proc_file);
  ASSERT_FALSE(q.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(q.status()));
  EXPECT_TRUE(absl::StrContains(q.status().message(), f.root + "/x/cpu.max")) << q.status();
}

TEST(CpuQuotaTest, FractionsRoundToNearestHalvesUpAtLeastOne) {
  EXPECT_EQ(RoundCpuQuota(0.3), 1);
  EXPECT_EQ(RoundCpuQuota(1.0), 1);
  EXPECT_EQ(RoundCpuQuota(1.49), 1);
  EXPECT_EQ(RoundCpuQuota(1.5), 2);
  EXPECT_EQ(RoundCpuQuota(2.4), 2);
  EXPECT_EQ(RoundCpuQuota(3.75), 4);
}

TEST(CpuBudgetTest, AffinityNodeAndQuotaEachCap) {
  CpuBudget b;
  b.affinity_cpus = 8;
  EXPECT_EQ(b.usable(), 8);
  b.numa_node = 1;
  b.node_cpus = 4;  // affinity ∩ node 1
  EXPECT_EQ(b.usable(), 4);
  b.quota.cpus = 2.5;
  b.quota.source = "cgroup v2 / cpu.max";
  EXPECT_EQ(b.usable(), 3);  // 2.5 rounds up
  b.quota.cpus = 16;
  EXPECT_EQ(b.usable(), 4);  // a quota above the CPUs there are does not add any
  EXPECT_EQ(b.Describe(), "4 usable CPUs (affinity 8, NUMA node 1: 4, cgroup quota 16.0 from cgroup v2 / cpu.max)");
}

ThreadPlan Plan(int affinity, double quota, int training = -1, int readers = 0) {
  CpuBudget b;
  b.affinity_cpus = affinity;
  b.quota.cpus = quota;
  b.quota.source = "test";
  TrainingThreads t;
  t.count = training;
  t.source = "torch.get_num_threads()";
  return PlanThreads(b, t, readers);
}

TEST(ThreadPlanTest, ReservesOneFromFourWhenTrainingThreadsUnknown) {
  ThreadPlan p = Plan(1, 0);
  EXPECT_EQ(p.reserved, 0);
  EXPECT_EQ(p.decode, 1);
  EXPECT_EQ(p.readers, 1);
  p = Plan(2, 0);
  EXPECT_EQ(p.reserved, 0);
  EXPECT_EQ(p.decode, 2);
  p = Plan(3, 0);
  EXPECT_EQ(p.decode, 3);
  p = Plan(4, 0);
  EXPECT_EQ(p.reserved, 1);
  EXPECT_EQ(p.decode, 3);
  EXPECT_EQ(p.readers, 1);
}

TEST(ThreadPlanTest, ReadersTakeOneCpuInNineAndServeEightDecoders) {
  ThreadPlan p = Plan(10, 0);  // 9 after the reservation
  EXPECT_EQ(p.decode, 8);
  EXPECT_EQ(p.readers, 1);
  p = Plan(19, 0);  // 18
  EXPECT_EQ(p.decode, 16);
  EXPECT_EQ(p.readers, 2);
  p = Plan(65, 0);  // 64
  EXPECT_EQ(p.decode, 57);
  EXPECT_EQ(p.readers, 8);
  p = Plan(65, 0, -1, 3);  // readers given: kept
  EXPECT_EQ(p.readers, 3);
}

TEST(ThreadPlanTest, ExplicitTrainingThreadsAreReservedButLeaveOneCpu) {
  ThreadPlan p = Plan(8, 0, 2);
  EXPECT_EQ(p.reserved, 2);
  EXPECT_EQ(p.decode, 6);
  p = Plan(8, 0, 1);
  EXPECT_EQ(p.reserved, 1);
  p = Plan(2, 0, 1);
  EXPECT_EQ(p.reserved, 1);
  EXPECT_EQ(p.decode, 1);
  p = Plan(4, 0, 16);  // more than there are: capped at usable - 1
  EXPECT_EQ(p.reserved, 3);
  EXPECT_EQ(p.decode, 1);
  EXPECT_TRUE(absl::StrContains(p.reason, "torch.get_num_threads()=16 set explicitly, capped")) << p.reason;
}

TEST(ThreadPlanTest, QuotaLimitsThreadsAndDescribeNamesTheLimits) {
  ThreadPlan p = Plan(8, 4.0, 1);
  EXPECT_EQ(p.usable, 4);
  EXPECT_EQ(p.decode, 3);
  EXPECT_EQ(p.Describe(),
            "decode 3, readers 1: 4 usable CPUs (affinity 8, cgroup quota 4.0 from test), 1 reserved "
            "for the training loop (torch.get_num_threads()=1 set explicitly)");
  p = Plan(64, 1.0);  // a 1-CPU container on a big host
  EXPECT_EQ(p.decode, 1);
  EXPECT_EQ(p.readers, 1);
  EXPECT_EQ(p.reserved, 0);
}

TEST(TrainingThreadsTest, OmpNumThreadsIsExplicit) {
  const char* saved = std::getenv("OMP_NUM_THREADS");
  const std::string saved_value = saved ? saved : "";
  setenv("OMP_NUM_THREADS", "4,2", 1);
  TrainingThreads t = TrainingThreadsFromEnvironment();
  EXPECT_EQ(t.count, 4);
  EXPECT_EQ(t.source, "OMP_NUM_THREADS");
  setenv("OMP_NUM_THREADS", "many", 1);
  EXPECT_EQ(TrainingThreadsFromEnvironment().count, -1);
  unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(TrainingThreadsFromEnvironment().count, -1);
  if (saved) setenv("OMP_NUM_THREADS", saved_value.c_str(), 1);
}

TEST(AvailableMemoryTest, MemAvailableCappedByTheCgroupLimitLessUsage) {
  FakeCgroup f = V2("/job/step");
  const std::string meminfo = f.root + "-meminfo";
  WriteText(meminfo, "MemTotal:       65536000 kB\nMemFree:  1000 kB\nMemAvailable:   16777216 kB\n");
  AvailableMemory m = ReadAvailableMemory(meminfo, f.root, f.proc_file);
  EXPECT_EQ(m.bytes, uint64_t{16} << 30);
  EXPECT_EQ(m.source, "MemAvailable");
  WriteText(f.root + "/job/memory.max", "4294967296\n");      // 4 GiB for the job ...
  WriteText(f.root + "/job/memory.current", "1073741824\n");  // ... 1 GiB of it used
  WriteText(f.root + "/job/step/memory.max", "max\n");
  m = ReadAvailableMemory(meminfo, f.root, f.proc_file);
  EXPECT_EQ(m.bytes, uint64_t{3} << 30);
  EXPECT_EQ(m.source, "cgroup v2 /job memory.max - memory.current");
  {
    // v2: memory.stat's inactive_file (hierarchical) is left out of the usage; never below 0.
    FakeCgroup g = V2("/job");
    WriteText(g.root + "/job/memory.max", "4294967296\n");
    WriteText(g.root + "/job/memory.current", "1073741824\n");
    WriteText(g.root + "/job/memory.stat", "anon 1\nfile 2\nactive_file 3\ninactive_file 536870912\n");
    EXPECT_EQ(ReadAvailableMemory(meminfo, g.root, g.proc_file).bytes, uint64_t{7} << 29);  // 3.5 GiB
    WriteText(g.root + "/job/memory.stat", "inactive_file 2147483648\n");
    AvailableMemory all = ReadAvailableMemory(meminfo, g.root, g.proc_file);
    EXPECT_EQ(all.bytes, uint64_t{4} << 30);
    EXPECT_EQ(all.source, "cgroup v2 /job memory.max - memory.current + 1.0 GiB inactive file cache");
  }
  std::string note;
  EXPECT_EQ(DefaultMemoryBudget(m, &note), uint64_t{3} << 28);  // a quarter: 0.75 GiB
  EXPECT_EQ(note, "the default, a quarter of 3.0 GiB available (cgroup v2 /job memory.max - "
                  "memory.current), at most 2 GiB");
}

TEST(AvailableMemoryTest, V1UnlimitedIsNoLimitAndUnknownGivesTwoGiB) {
  FakeCgroup f{MakeTempDir() + "/cgroup", ""};
  f.proc_file = f.root + "-proc";
  WriteText(f.proc_file, "4:memory:/docker/abc\n3:cpu:/docker/abc\n");
  WriteText(f.root + "/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
  WriteText(f.root + "/memory/docker/abc/memory.usage_in_bytes", "1000\n");
  AvailableMemory m = ReadAvailableMemory(f.root + "/no-meminfo", f.root, f.proc_file);
  EXPECT_EQ(m.bytes, 0u);
  std::string note;
  EXPECT_EQ(DefaultMemoryBudget(m, &note), uint64_t{2} << 30);
  EXPECT_EQ(note, "the default (available memory unknown)");
  WriteText(f.root + "/memory/docker/abc/memory.limit_in_bytes", "536870912\n");  // 512 MiB
  m = ReadAvailableMemory(f.root + "/no-meminfo", f.root, f.proc_file);
  EXPECT_EQ(m.bytes, (uint64_t{512} << 20) - 1000);
  EXPECT_EQ(m.source, "cgroup v1 /docker/abc memory.limit_in_bytes - memory.usage_in_bytes");
  // Page cache the job read through is in the usage; its inactive part is reclaimable, so it
  // counts as available (v1: the hierarchical total, as the usage is).
  WriteText(f.root + "/memory/docker/abc/memory.usage_in_bytes", "268436456\n");  // 256 MiB + 1000
  WriteText(f.root + "/memory/docker/abc/memory.stat",
            "cache 300000000\ninactive_file 1\ntotal_inactive_file 201326592\n");  // 192 MiB
  m = ReadAvailableMemory(f.root + "/no-meminfo", f.root, f.proc_file);
  EXPECT_EQ(m.bytes, (uint64_t{448} << 20) - 1000);
  EXPECT_EQ(m.source, "cgroup v1 /docker/abc memory.limit_in_bytes - memory.usage_in_bytes + 192.0 MiB "
                      "inactive file cache");
  EXPECT_EQ(DefaultMemoryBudget(AvailableMemory{uint64_t{64} << 30, "MemAvailable"}), uint64_t{2} << 30);
}

// The machine files of a loader in `cgroup` (and `meminfo`), handed to LoaderFactory.
internal::HostFiles MachineIn(const FakeCgroup& cgroup, std::string meminfo = "/proc/meminfo") {
  internal::HostFiles files;
  files.cgroup_root = cgroup.root;
  files.proc_self_cgroup = cgroup.proc_file;
  files.meminfo_path = std::move(meminfo);
  return files;
}

LoaderOptions AutoOptions() {
  LoaderOptions o;
  o.batch_size = 4;
  o.auto_threads = true;
  o.reader_threads = 0;
  o.training_threads = 1;
  o.training_threads_source = "torch.get_num_threads()";
  CenterCropParams crop;
  crop.size_h = crop.size_w = 16;
  o.transform = {crop};
  o.dtype = DType::kUint8;
  return o;
}

TEST(LoaderAutoTest, QuotaSizesTheThreadsAndStatsSayWhy) {
  FakeCgroup f = V2("/ctr");
  WriteText(f.root + "/ctr/cpu.max", "100000 100000\n");  // 1 CPU
  std::vector<Sample> samples = testing::WriteJpegDataset(MakeTempDir(), 8);
  absl::StatusOr<std::unique_ptr<Loader>> loader = LoaderFactory::Create(samples, AutoOptions(), MachineIn(f));
  ASSERT_TRUE(loader.ok()) << loader.status();
  LoaderStats s = (*loader)->Stats();
  EXPECT_EQ(s.decode_threads, 1);
  EXPECT_EQ(s.reader_threads, 1);
  EXPECT_TRUE(absl::StartsWith(s.threads_note, "decode 1, readers 1: 1 usable CPU (affinity ")) << s.threads_note;
  EXPECT_TRUE(absl::StrContains(s.threads_note, "cgroup quota 1.0 from cgroup v2 /ctr cpu.max")) << s.threads_note;
  // 1 usable CPU: the explicit training thread cannot take the only one.
  EXPECT_TRUE(absl::StrContains(s.threads_note, "0 reserved for the training loop (torch.get_num_threads()=1 "
                                                "set explicitly, capped")) << s.threads_note;
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  int batches = 0;
  while ((*loader)->Next().ok()) ++batches;
  EXPECT_EQ(batches, 2);
}

TEST(LoaderAutoTest, MaxMemoryBoundsSlotsAndTheAdaptiveDepth) {
  FakeCgroup f = V2("/ctr");
  std::vector<Sample> samples = testing::WriteJpegDataset(MakeTempDir(), 8);
  const internal::HostFiles machine = MachineIn(f);
  LoaderOptions o = AutoOptions();
  o.auto_prefetch = true;
  o.prefetch_batches = 2;
  const size_t slot = 4 * 3 * 16 * 16 + 2 * 4 * 8;
  o.max_memory = 7 * slot + slot / 2;  // 7 slots and a half: 7
  absl::StatusOr<std::unique_ptr<Loader>> loader = LoaderFactory::Create(samples, o, machine);
  ASSERT_TRUE(loader.ok()) << loader.status();
  LoaderStats s = (*loader)->Stats();
  EXPECT_EQ(s.slot_bytes, static_cast<int64_t>(slot));
  EXPECT_EQ(s.max_slots, 7);
  EXPECT_EQ(s.prefetch_batches, 2);
  EXPECT_EQ(s.prefetch_max, 3);  // half of 7
  {
    // With a device the pipeline never deepens (the ring keeps its size), and says so.
    LoaderOptions staged = o;
    staged.device_runtime = std::make_shared<SimulatedDevice>();
    absl::StatusOr<std::unique_ptr<Loader>> on_device = LoaderFactory::Create(samples, staged, machine);
    ASSERT_TRUE(on_device.ok()) << on_device.status();
    EXPECT_EQ((*on_device)->Stats().prefetch_max, 2);
  }
  o.max_memory = slot + 1;       // not even 2 slots
  loader = LoaderFactory::Create(samples, o, machine);
  ASSERT_FALSE(loader.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(loader.status()));
  EXPECT_TRUE(absl::StrContains(loader.status().message(), "max_memory=")) << loader.status();
  o.auto_prefetch = false;  // a fixed depth that does not fit is cut to slots - 1, and says so
  o.prefetch_batches = 4;
  o.max_memory = 4 * slot;
  loader = LoaderFactory::Create(samples, o, machine);
  ASSERT_TRUE(loader.ok()) << loader.status();
  s = (*loader)->Stats();
  EXPECT_EQ(s.max_slots, 4);
  EXPECT_EQ(s.prefetch_batches, 3);
  EXPECT_FALSE(s.read_ahead);
  EXPECT_TRUE(absl::StartsWith(s.slots_note, "prefetch 4 -> 3 batches (the budget holds 4 slots")) << s.slots_note;
  // A whole epoch runs within it, and the read-ahead asked for is not started.
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  ASSERT_TRUE((*loader)->QueueEpoch(1).ok());
  EXPECT_FALSE((*loader)->HasQueuedEpoch());
  int batches = 0;
  while ((*loader)->Next().ok()) ++batches;
  EXPECT_EQ(batches, 2);
  EXPECT_LE((*loader)->Stats().slots_allocated, 4);
}

TEST(LoaderAutoTest, DefaultMemoryBudgetFollowsASmallCgroup) {
  FakeCgroup f = V2("/ctr");
  WriteText(f.root + "/ctr/memory.max", "4000000\n");  // 4 MB: a 1 MB budget
  std::vector<Sample> samples = testing::WriteJpegDataset(MakeTempDir(), 8);
  LoaderOptions o = AutoOptions();
  o.prefetch_batches = 2;
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      LoaderFactory::Create(samples, o, MachineIn(f, f.root + "/no-meminfo"));
  ASSERT_TRUE(loader.ok()) << loader.status();
  LoaderStats s = (*loader)->Stats();
  EXPECT_EQ(s.max_memory, 1000000);
  EXPECT_EQ(s.max_slots, static_cast<int>(1000000 / s.slot_bytes));
  EXPECT_TRUE(absl::StrContains(s.memory_budget_note, "the default, a quarter of 3.8 MiB available (cgroup v2 /ctr memory.max"))
      << s.memory_budget_note;
}

TEST(LoaderAutoTest, ATinyCgroupCutsTheDepthOrRefusesAtCreate) {
  const size_t slot = 4 * 3 * 16 * 16 + 2 * 4 * 8;
  std::vector<Sample> samples = testing::WriteJpegDataset(MakeTempDir(), 8);
  {
    // A quarter of 16000 bytes holds 1 slot; 2 fit in half of it: the default rises to them.
    FakeCgroup f = V2("/ctr");
    WriteText(f.root + "/ctr/memory.max", "16000\n");
    LoaderOptions o = AutoOptions();
    o.prefetch_batches = 4;
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        LoaderFactory::Create(samples, o, MachineIn(f, f.root + "/no-meminfo"));
    ASSERT_TRUE(loader.ok()) << loader.status();
    LoaderStats s = (*loader)->Stats();
    EXPECT_EQ(s.max_memory, static_cast<int64_t>(2 * slot));
    EXPECT_EQ(s.max_slots, 2);
    EXPECT_EQ(s.prefetch_batches, 1);
    EXPECT_FALSE(s.read_ahead);
    EXPECT_TRUE(absl::StartsWith(s.slots_note, "the default budget holds fewer than 2 slots: raised to 2 x "))
        << s.slots_note;
    ASSERT_TRUE((*loader)->StartEpoch(0).ok());
    int batches = 0;
    for (absl::StatusOr<Batch> b = (*loader)->Next(); b.ok(); b = (*loader)->Next()) ++batches;
    EXPECT_EQ(batches, 2);
  }
  {
    // 10000 bytes: 2 slots are more than half of it. Refused, naming the budget and the need.
    FakeCgroup f = V2("/ctr");
    WriteText(f.root + "/ctr/memory.max", "10000\n");
    LoaderOptions o = AutoOptions();
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        LoaderFactory::Create(samples, o, MachineIn(f, f.root + "/no-meminfo"));
    ASSERT_TRUE(absl::IsInvalidArgument(loader.status())) << loader.status();
    const absl::string_view message = loader.status().message();
    EXPECT_TRUE(absl::StartsWith(message, "the memory budget (2.4 KiB: the default, a quarter of 9.8 KiB available "
                                          "(cgroup v2 /ctr memory.max - memory.current), at most 2 GiB) holds 0 "
                                          "batch slots of 3136 bytes")) << message;
    EXPECT_TRUE(absl::StrContains(message, "needs at least 2 (one being filled, one the training loop holds): "
                                           "2 x 3136 = 6272 bytes")) << message;
    EXPECT_TRUE(absl::StrContains(message, "lower batch_size or the output size")) << message;
    EXPECT_TRUE(absl::StrContains(message, "max_memory=")) << message;
  }
}

}  // namespace
}  // namespace ringloader
