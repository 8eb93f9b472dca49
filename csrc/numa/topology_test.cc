#include "numa/topology.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cuda/device_stager.h"
#include "ringloader/ringloader.h"
#include "testing/jpeg_fixtures.h"
#include "pipeline/loader_factory.h"

namespace ringloader {
namespace {

using testing::MakeTempDir;
using testing::WriteText;

// A two-socket machine: node 0 = CPUs 0-3,8-11, node 1 = CPUs 4-7,12-15, three PCI devices.
std::string FakeTwoNodeSysfs() {
  const std::string root = MakeTempDir();
  WriteText(root + "/devices/system/node/node0/cpulist", "0-3,8-11\n");
  WriteText(root + "/devices/system/node/node1/cpulist", "4-7,12-15\n");
  WriteText(root + "/devices/system/node/online", "0-1\n");  // not a node directory: ignored
  WriteText(root + "/bus/pci/devices/0000:3b:00.0/numa_node", "1\n");
  WriteText(root + "/bus/pci/devices/0000:18:00.0/numa_node", "0\n");
  WriteText(root + "/bus/pci/devices/0000:af:00.0/numa_node", "-1\n");
  return root;
}

std::vector<int> Range(int first, int last) {
  std::vector<int> v;
  for (int i = first; i <= last; ++i) v.push_back(i);
  return v;
}

NumaOption Node(int node) {
  NumaOption o;
  o.mode = NumaOption::Mode::kNode;
  o.node = node;
  return o;
}

/// A loader's machine files with the topology read under `root` (a fake sysfs tree).
internal::HostFiles SysfsAt(const std::string& root) {
  internal::HostFiles files;
  files.sysfs_root = root;
  return files;
}

NumaOption Auto() {
  NumaOption o;
  o.mode = NumaOption::Mode::kAuto;
  return o;
}

TEST(CpuListTest, ParsesRangesSinglesAndWhitespace) {
  EXPECT_EQ(ParseCpuList("0-3,8-11").value(), (std::vector<int>{0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(ParseCpuList("5").value(), (std::vector<int>{5}));
  EXPECT_EQ(ParseCpuList(" 7,2,2-3 \n").value(), (std::vector<int>{2, 3, 7}));
  EXPECT_TRUE(ParseCpuList("").value().empty());
  EXPECT_TRUE(ParseCpuList("\n").value().empty());
}

TEST(CpuListTest, RejectsMalformedLists) {
  for (const char* bad : {"3-1", "a", "1-", "-1", "0,,1", "1-2-3", "0x3"}) {
    absl::StatusOr<std::vector<int>> parsed = ParseCpuList(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << bad;
  }
}

TEST(CpuListTest, FormatsCompactlyAndRoundTrips) {
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 8, 9, 10, 11}), "0-3,8-11");
  EXPECT_EQ(FormatCpuList({5}), "5");
  EXPECT_EQ(FormatCpuList({1, 3, 4}), "1,3-4");
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_EQ(FormatCpuList(ParseCpuList("4-7,12-15").value()), "4-7,12-15");
}

TEST(CpuListTest, IntersectsWithAnAffinityMask) {
  const std::vector<int> node0 = ParseCpuList("0-3,8-11").value();
  EXPECT_EQ(IntersectCpus(node0, {2, 3, 4, 5, 8}), (std::vector<int>{2, 3, 8}));
  EXPECT_TRUE(IntersectCpus(node0, {4, 5, 6}).empty());
}

TEST(PciBusIdTest, NormalisesCaseAndDomain) {
  EXPECT_EQ(NormalizePciBusId("0000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(NormalizePciBusId("3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(NormalizePciBusId("00000000:3B:00.0"), "0000:3b:00.0");  // nvidia-smi style
  EXPECT_EQ(NormalizePciBusId("0001:AF:00.1\n"), "0001:af:00.1");
}

TEST(TopologyTest, ReadsAFakeTwoNodeTree) {
  const std::string root = FakeTwoNodeSysfs();
  NumaTopology topology = NumaTopology::Read(root).value();
  ASSERT_EQ(topology.nodes().size(), 2u);
  EXPECT_EQ(topology.nodes()[0].id, 0);
  EXPECT_EQ(topology.nodes()[0].cpus, ParseCpuList("0-3,8-11").value());
  EXPECT_EQ(topology.nodes()[1].id, 1);
  EXPECT_EQ(topology.nodes()[1].cpus, ParseCpuList("4-7,12-15").value());
  EXPECT_EQ(topology.NodeOfCpu(9), 0);
  EXPECT_EQ(topology.NodeOfCpu(13), 1);
  EXPECT_EQ(topology.NodeOfCpu(99), -1);
  EXPECT_EQ(topology.Find(2), nullptr);
}

TEST(TopologyTest, FindsTheGpuNodeFromThePciTree) {
  NumaTopology topology = NumaTopology::Read(FakeTwoNodeSysfs()).value();
  EXPECT_EQ(topology.NodeOfPciDevice("0000:3b:00.0"), 1);
  EXPECT_EQ(topology.NodeOfPciDevice("00000000:3B:00.0"), 1);  // as cudaDeviceGetPCIBusId may print it
  EXPECT_EQ(topology.NodeOfPciDevice("18:00.0"), 0);
  EXPECT_EQ(topology.NodeOfPciDevice("0000:af:00.0"), -1);  // firmware said -1
  EXPECT_EQ(topology.NodeOfPciDevice("0000:01:00.0"), -1);  // no such device
  EXPECT_EQ(topology.NodeOfPciDevice(""), -1);
}

TEST(TopologyTest, NoNodeDirectoryIsAnEmptyTopologyAndBadCpulistIsAnError) {
  NumaTopology empty = NumaTopology::Read(MakeTempDir()).value();
  EXPECT_TRUE(empty.nodes().empty());
  const std::string root = MakeTempDir();
  WriteText(root + "/devices/system/node/node0/cpulist", "0-x\n");
  absl::StatusOr<NumaTopology> bad = NumaTopology::Read(root);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "node0/cpulist")) << bad.status();
}

TEST(PlacementTest, ExplicitNodeIsIntersectedWithTheAllowedCpus) {
  NumaTopology topology = NumaTopology::Read(FakeTwoNodeSysfs()).value();
  NumaPlacement all = ChooseNumaPlacement(topology, Node(1), Range(0, 15), 0, "").value();
  EXPECT_EQ(all.node, 1);
  EXPECT_EQ(FormatCpuList(all.cpus), "4-7,12-15");
  // A taskset/cpuset of 0,1,4,5: node 1's threads may only use 4 and 5.
  NumaPlacement some = ChooseNumaPlacement(topology, Node(1), {0, 1, 4, 5}, 0, "").value();
  EXPECT_EQ(some.cpus, (std::vector<int>{4, 5}));
}

TEST(PlacementTest, ExplicitNodeOutOfRangeOrOutsideTheMaskIsAClearError) {
  NumaTopology topology = NumaTopology::Read(FakeTwoNodeSysfs()).value();
  absl::StatusOr<NumaPlacement> missing = ChooseNumaPlacement(topology, Node(2), Range(0, 15), 0, "");
  ASSERT_TRUE(absl::IsInvalidArgument(missing.status())) << missing.status();
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "numa=2: no such NUMA node; nodes: 0, 1"))
      << missing.status();
  absl::StatusOr<NumaPlacement> outside = ChooseNumaPlacement(topology, Node(1), Range(0, 3), 0, "");
  ASSERT_TRUE(absl::IsInvalidArgument(outside.status())) << outside.status();
  EXPECT_TRUE(absl::StrContains(outside.status().message(), "4-7,12-15")) << outside.status();
  NumaTopology empty = NumaTopology::Read(MakeTempDir()).value();
  EXPECT_TRUE(absl::IsInvalidArgument(ChooseNumaPlacement(empty, Node(0), Range(0, 3), 0, "").status()));
}

TEST(PlacementTest, AutoFollowsTheGpuThenTheCallerAndOffPlacesNothing) {
  NumaTopology topology = NumaTopology::Read(FakeTwoNodeSysfs()).value();
  NumaPlacement gpu = ChooseNumaPlacement(topology, Auto(), Range(0, 15), /*current_cpu=*/0, "0000:3B:00.0").value();
  EXPECT_EQ(gpu.node, 1);  // the GPU's node wins over the caller's CPU
  EXPECT_EQ(FormatCpuList(gpu.cpus), "4-7,12-15");
  EXPECT_TRUE(absl::StrContains(gpu.note, "0000:3b:00.0 is on node 1")) << gpu.note;

  NumaPlacement unknown_gpu = ChooseNumaPlacement(topology, Auto(), Range(0, 15), 0, "0000:af:00.0").value();
  EXPECT_EQ(unknown_gpu.node, -1);
  EXPECT_TRUE(unknown_gpu.cpus.empty());

  NumaPlacement caller = ChooseNumaPlacement(topology, Auto(), {8, 9, 12}, /*current_cpu=*/9, "").value();
  EXPECT_EQ(caller.node, 0);
  EXPECT_EQ(caller.cpus, (std::vector<int>{8, 9}));

  NumaPlacement no_cpu = ChooseNumaPlacement(topology, Auto(), Range(0, 15), -1, "").value();
  EXPECT_EQ(no_cpu.node, -1);
  EXPECT_TRUE(no_cpu.cpus.empty());

  // GPU on node 1 but the process may only run on node 0: memory on node 1, threads unpinned.
  NumaPlacement masked = ChooseNumaPlacement(topology, Auto(), Range(0, 3), 0, "0000:3b:00.0").value();
  EXPECT_EQ(masked.node, 1);
  EXPECT_TRUE(masked.cpus.empty());

  NumaPlacement off = ChooseNumaPlacement(topology, NumaOption{}, Range(0, 15), 0, "0000:3b:00.0").value();
  EXPECT_EQ(off.node, -1);
  EXPECT_TRUE(off.cpus.empty());

  NumaTopology empty = NumaTopology::Read(MakeTempDir()).value();
  EXPECT_EQ(ChooseNumaPlacement(empty, Auto(), Range(0, 3), 0, "").value().node, -1);
}

TEST(ShareTest, RanksGetDisjointContiguousPartsThatCoverTheCpus) {
  // 16 CPUs among 3 ranks: 5, 5, 6, in order, none shared, none left out.
  EXPECT_EQ(ShareOfCpus(Range(0, 15), 0, 3), Range(0, 4));
  EXPECT_EQ(ShareOfCpus(Range(0, 15), 1, 3), Range(5, 9));
  EXPECT_EQ(ShareOfCpus(Range(0, 15), 2, 3), Range(10, 15));
  EXPECT_EQ(ShareOfCpus({0, 1}, 1, 2), (std::vector<int>{1}));
  // A node's cores and their SMT siblings: each rank takes whole cores (a slice of each run).
  EXPECT_EQ(ShareOfCpus({4, 5, 12, 13}, 1, 2), (std::vector<int>{5, 13}));
  EXPECT_EQ(FormatCpuList(ShareOfCpus(ParseCpuList("20-39,60-79").value(), 1, 4)), "25-29,65-69");
  // A run shorter than the parts (a cpuset "0-3,5"): contiguous slices of the whole list.
  EXPECT_EQ(ShareOfCpus({0, 1, 2, 3, 5}, 1, 2), (std::vector<int>{2, 3, 5}));
  // Fewer CPUs than ranks: one CPU each, round the CPUs.
  EXPECT_EQ(ShareOfCpus({0, 1}, 2, 3), (std::vector<int>{0}));
  EXPECT_EQ(ShareOfCpus({0, 1}, 0, 1), (std::vector<int>{0, 1}));
}

TEST(ShareTest, RanksKeepWholeCoresByTheSiblingsSysfsTells) {
  // One socket, 8 cores, SMT siblings numbered i and i + 8 (one run "0-15"): the holes in the
  // list say nothing there, the siblings list does. Each of 2 ranks gets 4 whole cores.
  const std::string root = MakeTempDir();
  WriteText(root + "/devices/system/node/node0/cpulist", "0-15\n");
  for (int cpu = 0; cpu < 16; ++cpu) {
    WriteText(absl::StrCat(root, "/devices/system/cpu/cpu", cpu, "/topology/thread_siblings_list"),
              absl::StrCat(cpu % 8, ",", cpu % 8 + 8, "\n"));
  }
  NumaTopology topology = NumaTopology::Read(root).value();
  EXPECT_EQ(topology.CoreOf(9), (std::vector<int>{1, 9}));
  EXPECT_TRUE(topology.CoreOf(99).empty());
  const auto core_of = [&](int cpu) { return topology.CoreOf(cpu); };
  EXPECT_EQ(FormatCpuList(ShareOfCpus(Range(0, 15), 0, 2, core_of)), "0-3,8-11");
  EXPECT_EQ(FormatCpuList(ShareOfCpus(Range(0, 15), 1, 2, core_of)), "4-7,12-15");
  // A mask with both siblings of cores 0 and 1 only: cores are shared out (4 each), and each
  // sibling goes with its core.
  EXPECT_EQ(FormatCpuList(ShareOfCpus(ParseCpuList("0-9").value(), 0, 2, core_of)), "0-3,8-9");
  EXPECT_EQ(FormatCpuList(ShareOfCpus(ParseCpuList("0-9").value(), 1, 2, core_of)), "4-7");
  // Without siblings told, the rule by runs of ids.
  NumaTopology bare = NumaTopology::Read(FakeTwoNodeSysfs()).value();
  EXPECT_EQ(ShareOfCpus(Range(0, 15), 1, 2, [&](int cpu) { return bare.CoreOf(cpu); }), Range(8, 15));
  // And the placement a rank gets uses them.
  NumaOption option;
  option.mode = NumaOption::Mode::kOff;
  option.share_index = 1;
  option.share_count = 2;
  EXPECT_EQ(FormatCpuList(ChooseNumaPlacement(topology, option, Range(0, 15), 0, "").value().cpus), "4-7,12-15");
}

TEST(ShareTest, RanksShareTheirGpusNodeOrTheAllowedCpusAndMemoryFollowsOnlyANode) {
  NumaTopology topology = NumaTopology::Read(FakeTwoNodeSysfs()).value();
  // The process's own GPU (no staging device): rank 1 of the 2 ranks whose GPUs sit on node 1.
  NumaOption o = Auto();
  o.gpu_bus_id = "0000:3b:00.0";
  o.share_index = 1;
  o.share_count = 2;
  NumaPlacement gpu = ChooseNumaPlacement(topology, o, Range(0, 15), 0, "").value();
  EXPECT_EQ(gpu.node, 1);
  EXPECT_EQ(FormatCpuList(gpu.cpus), "6-7,14-15");
  EXPECT_TRUE(absl::StrContains(gpu.note, "share 1 of 2 of the node's CPUs 4-7,12-15")) << gpu.note;
  // numa off: no node, threads still take their share of the allowed CPUs.
  NumaOption off;
  off.share_index = 0;
  off.share_count = 2;
  NumaPlacement split = ChooseNumaPlacement(topology, off, Range(0, 1), 0, "").value();
  EXPECT_EQ(split.node, -1);
  EXPECT_EQ(split.cpus, (std::vector<int>{0}));
  off.share_index = 2;
  EXPECT_TRUE(absl::IsInvalidArgument(ChooseNumaPlacement(topology, off, Range(0, 1), 0, "").status()));
}

TEST(PinningTest, PinsTheCallingThreadAndReadsItBack) {
  const std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  std::vector<int> seen;
  absl::Status status;
  std::thread t([&] {
    status = PinCurrentThread({allowed.back()});
    seen = AllowedCpus();
  });
  t.join();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(seen, std::vector<int>{allowed.back()});
  EXPECT_EQ(AllowedCpus(), allowed);  // only that thread changed
}

TEST(AllocationTest, NodeMemoryIsUsableAndCarriesThePreferredPolicy) {
  std::string how;
  constexpr size_t kBytes = 3 * 4096 + 100;
  auto* p = static_cast<uint8_t*>(AllocateOnNode(kBytes, 0, &how));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  std::memset(p, 0xab, kBytes);
  EXPECT_EQ(p[kBytes - 1], 0xab);
  if (CanBindMemory()) {
    EXPECT_EQ(how, "mbind preferred node 0");
    int mode = -1;
    unsigned long mask[16] = {};
    // MPOL_F_ADDR (2): the policy of the mapping at p. Raw syscall: the test needs no libnuma.
    ASSERT_EQ(syscall(SYS_get_mempolicy, &mode, mask, sizeof(mask) * 8, p, 2UL), 0) << std::strerror(errno);
    EXPECT_EQ(mode, 1);  // MPOL_PREFERRED
    EXPECT_EQ(mask[0] & 1UL, 1UL);
  }
  FreeOnNode(p, kBytes);
}

// ---- the Loader ---------------------------------------------------------------------------

std::vector<Sample> SmallDataset(int n) { return testing::WriteJpegDataset(MakeTempDir(), n, 2); }

LoaderOptions SmallOptions() {
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  o.reader_threads = 1;
  o.prefetch_batches = 2;
  o.io_depth = 4;
  ResizeParams resize;
  resize.size_h = resize.size_w = 32;
  CenterCropParams center;
  center.size_h = center.size_w = 32;
  ToTensorParams tensor;
  o.transform = {resize, center, tensor};
  return o;
}

struct TaskInfo {
  std::string comm;
  std::string cpus_allowed;
};

std::vector<TaskInfo> ProcessThreads() {
  std::vector<TaskInfo> tasks;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return tasks;
  while (dirent* entry = readdir(d)) {
    if (entry->d_name[0] == '.') continue;
    const std::string base = absl::StrCat("/proc/self/task/", entry->d_name);
    TaskInfo info;
    std::ifstream comm(base + "/comm");
    std::getline(comm, info.comm);
    std::ifstream status(base + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0) {
        info.cpus_allowed = std::string(absl::StripAsciiWhitespace(line.substr(18)));
      }
    }
    tasks.push_back(info);
  }
  closedir(d);
  return tasks;
}

// Threads pin themselves as they start; wait until all of them did before inspecting /proc.
void WaitForPinnedThreads(const Loader& loader, int expected) {
  for (int i = 0; i < 500 && loader.Stats().threads_pinned < expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(loader.Stats().threads_pinned, expected);
}

TEST(LoaderNumaTest, ExplicitNodeZeroKeepsWorkersWithinNodeZero) {
  NumaTopology real = NumaTopology::Read("/sys").value();
  if (real.Find(0) == nullptr) GTEST_SKIP() << "no NUMA node 0 under /sys on this machine";
  LoaderOptions o = SmallOptions();
  o.numa = Node(0);
  // More batches than the slots hold: the decode threads are still alive (waiting for room)
  // when /proc is read, however slowly they ran (a sanitizer build); 12 samples could all be
  // decoded, and their threads gone, by then.
  auto loader = Loader::Create(SmallDataset(64), o).value();
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  ASSERT_TRUE(loader->Next().ok());
  WaitForPinnedThreads(*loader, 1 + o.reader_threads + o.num_workers);  // dispatcher, readers, workers
  const std::vector<int> expected = IntersectCpus(real.Find(0)->cpus, AllowedCpus());
  LoaderStats s = loader->Stats();
  EXPECT_EQ(s.numa_node, 0);
  EXPECT_EQ(s.numa_cpus, FormatCpuList(expected));
  const std::vector<int> thread_cpus = ParseCpuList(s.thread_cpus).value();
  ASSERT_FALSE(thread_cpus.empty());
  for (int cpu : thread_cpus) {
    EXPECT_TRUE(std::binary_search(expected.begin(), expected.end(), cpu)) << s.thread_cpus;
  }
  EXPECT_TRUE(absl::StrContains(s.memory, "NUMA node 0")) << s.memory;
  int decoders = 0;
  for (const TaskInfo& t : ProcessThreads()) {
    if (t.comm != "rl-decode") continue;
    ++decoders;
    EXPECT_EQ(t.cpus_allowed, FormatCpuList(expected));
  }
  EXPECT_EQ(decoders, o.num_workers);
}

// Node 0 of a fake tree holds only the last allowed CPU, so pinning is visible even on a
// single-node machine: the decode threads must be narrower than the test's own thread.
TEST(LoaderNumaTest, WorkersArePinnedToTheFakeNodesCpusReadBackFromProc) {
  const std::vector<int> allowed = AllowedCpus();
  if (allowed.size() < 2) GTEST_SKIP() << "needs 2 allowed CPUs, have " << allowed.size();
  const std::string root = MakeTempDir();
  const int last = allowed.back();
  std::vector<int> others(allowed.begin(), allowed.end() - 1);
  WriteText(root + "/devices/system/node/node0/cpulist", absl::StrCat(last, "\n"));
  WriteText(root + "/devices/system/node/node1/cpulist", FormatCpuList(others) + "\n");
  LoaderOptions o = SmallOptions();
  o.numa = Node(0);
  const internal::HostFiles machine = SysfsAt(root);
  auto loader = LoaderFactory::Create(SmallDataset(64), o, machine).value();  // threads alive: as above
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  {
    absl::StatusOr<Batch> batch = loader->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(batch->size(), 4);
  }
  WaitForPinnedThreads(*loader, 1 + o.reader_threads + o.num_workers);
  int decoders = 0;
  for (const TaskInfo& t : ProcessThreads()) {
    if (t.comm != "rl-decode") continue;
    ++decoders;
    EXPECT_EQ(t.cpus_allowed, absl::StrCat(last));
  }
  EXPECT_EQ(decoders, o.num_workers);
  EXPECT_EQ(loader->Stats().thread_cpus, absl::StrCat(last));
  EXPECT_EQ(AllowedCpus(), allowed);  // the consumer thread was not touched
  int batches = 1;
  while (loader->Next().ok()) ++batches;
  EXPECT_EQ(batches, 16);

  o.numa = Node(1);
  auto other = LoaderFactory::Create(SmallDataset(4), o, machine).value();
  EXPECT_EQ(other->Stats().numa_cpus, FormatCpuList(others));
}

TEST(LoaderNumaTest, PlacementErrorsAndDefaults) {
  LoaderOptions o = SmallOptions();
  o.numa = Node(4096);
  absl::StatusOr<std::unique_ptr<Loader>> missing = Loader::Create(SmallDataset(4), o);
  ASSERT_TRUE(absl::IsInvalidArgument(missing.status())) << missing.status();
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "no such NUMA node")) << missing.status();

  o.numa = NumaOption{};  // default: off
  LoaderStats off = Loader::Create(SmallDataset(4), o).value()->Stats();
  EXPECT_EQ(off.numa_node, -1);
  EXPECT_EQ(off.numa_cpus, "");
  EXPECT_EQ(off.memory, "host");

  o.numa = Auto();  // no device: the caller's node
  LoaderStats automatic = Loader::Create(SmallDataset(4), o).value()->Stats();
  NumaTopology real = NumaTopology::Read("/sys").value();
  EXPECT_EQ(automatic.numa_node, real.nodes().empty() ? -1 : real.NodeOfCpu(CurrentCpu()));
  EXPECT_FALSE(automatic.numa_note.empty());
}

TEST(LoaderDeviceTest, DeviceOptionIsParsedAndCudaWithoutAGpuFailsAtConstruction) {
  EXPECT_EQ(ParseDevice("cpu").value(), -1);
  EXPECT_EQ(ParseDevice("cuda").value(), 0);
  EXPECT_EQ(ParseDevice("cuda:3").value(), 3);
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "CUDA"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseDevice(bad).status())) << bad;
  }
  LoaderOptions o = SmallOptions();
  o.device = "cuda:0";
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(SmallDataset(4), o);
  // This file only checks the no-GPU branch; the GPU path is tested by tests/cuda.
  if (loader.ok()) GTEST_SKIP() << "a CUDA device is visible";
  EXPECT_TRUE(absl::IsFailedPrecondition(loader.status())) << loader.status();
  EXPECT_TRUE(absl::StrContains(loader.status().message(), "device='cuda:0' but")) << loader.status();
  o.device = "tpu";
  EXPECT_TRUE(absl::IsInvalidArgument(Loader::Create(SmallDataset(4), o).status()));
}

}  // namespace
}  // namespace ringloader
