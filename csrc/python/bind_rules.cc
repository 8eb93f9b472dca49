// Rules the Python package asks for instead of keeping copies that could drift (thread plans,
// memory budgets, the node's topology, sample keys, tar member names, transform kernels for tests).

#include <unistd.h>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <tuple>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/cpu_budget.h"
#include "cuda/device_stager.h"
#include "dataset/image_folder.h"
#include "decode/jpeg_decoder.h"
#include "dataset/tar.h"
#include "dataset/webdataset.h"
#include "io/pending_downloads.h"
#include "io/reader.h"
#include "io/range_reads.h"
#include "io/shard_cache.h"
#include "pipeline/epoch.h"  // ReplaceCandidate
#include "pipeline/loader_stats_fields.h"
#include "pipeline/slot_pool.h"
#include "pipeline/verdict.h"
#include "pipeline/views.h"
#include "numa/topology.h"
#include "python/dlpack.h"
#include "python/bind_video.h"
#include "transform/augment.h"
#include "transform/image_ops.h"
#include "transform/image_transform.h"  // StepKinds
#include "ringloader/ringloader.h"
#include "python/bind_common.h"
#include "python/bind_options.h"
#include "pipeline/loader_factory.h"

namespace py = pybind11;

namespace ringloader {
namespace {

// Test hooks: single native image kernels on arrays, for the parity tests against Pillow/torch.
void BindImageOpHooks(py::module_& m) {
  m.def(
      "_apply_image_op",
      [](const std::string& name, py::array_t<uint8_t, py::array::c_style | py::array::forcecast> img,
         const std::map<std::string, std::vector<double>>& args) {
        if (img.ndim() != 3 || img.shape(2) != 3) throw py::value_error("image must be HxWx3 uint8");
        int h = static_cast<int>(img.shape(0)), w = static_cast<int>(img.shape(1));
        std::vector<uint8_t> pixels(img.data(), img.data() + img.size());
        absl::Status status = ApplyImageOpForTesting(name, args, &pixels, &w, &h);
        ThrowIfError(status);
        py::array_t<uint8_t> out({h, w, 3});
        std::memcpy(out.mutable_data(), pixels.data(), pixels.size());
        return out;
      },
      py::arg("name"), py::arg("image"), py::arg("args"),
      "Test hook: one native image operation on an HxWx3 uint8 array (parity tests).");
  m.def(
      "_augmix_for_testing",
      [](py::array_t<uint8_t, py::array::c_style | py::array::forcecast> img, bool v2,
         int interpolation, bool all_ops, float m0, float m1, const std::vector<float>& weights,
         const std::vector<std::vector<std::array<int, 3>>>& chains, bool fused_grid) {
        if (img.ndim() != 3 || img.shape(2) != 3) throw py::value_error("image must be HxWx3 uint8");
        const int h = static_cast<int>(img.shape(0)), w = static_cast<int>(img.shape(1));
        AugMixParams s;
        s.v2_magnitudes = v2;
        s.interpolation = static_cast<Interpolation>(interpolation);
        s.all_ops = all_ops;
        s.fused_grid = fused_grid;
        AugMixDraws draws;
        draws.m0 = m0;
        draws.m1 = m1;
        draws.weights = weights;
        for (const auto& chain : chains) {
          draws.chains.emplace_back();
          for (const auto& op : chain) draws.chains.back().push_back({op[0], op[1], op[2] != 0});
        }
        py::array_t<uint8_t> out({h, w, 3});
        std::memcpy(out.mutable_data(), img.data(), static_cast<size_t>(img.size()));
        AugmentScratch scratch;
        ThrowIfError(ApplyAugMixDraws(
            s, draws, scratch, RgbView{out.mutable_data(), w, h, static_cast<size_t>(w) * 3}));
        return out;
      },
      py::arg("image"), py::arg("v2"), py::arg("interpolation"), py::arg("all_ops"), py::arg("m0"),
      py::arg("m1"), py::arg("weights"), py::arg("chains"), py::arg("fused_grid") = true,
      "Test hook: AugMix with fixed draws (chains of (op index, bin, negated)) on an HxWx3 "
      "uint8 array (parity tests).");
}

// The threads and the memory a loader with given options gets, without making one.
void BindThreadPlans(py::module_& m) {
  m.def(
      "choose_auto_threads",
      [](py::dict options) {
        internal::HostFiles host;
        LoaderOptions o = ParseOptions(options, &host);
        absl::StatusOr<AutoThreads> plan;
        {
          py::gil_scoped_release release;
          plan = internal::ChooseAutoThreads(o, host);
        }
        ThrowIfError(plan.status());
        py::dict d;
        d["decode_threads"] = plan->decode_threads;
        d["reader_threads"] = plan->reader_threads;
        d["usable_cpus"] = plan->usable_cpus;
        d["reserved_cpus"] = plan->reserved_cpus;
        d["note"] = plan->note;
        return d;
      },
      py::arg("options"),
      "The threads num_workers='auto' chooses for these loader options, and why (no loader).");
  m.def(
      "default_memory_budget",
      [](py::dict options) {
        // The slot-memory budget a loader with these options gets when max_memory is not given.
        internal::HostFiles host;
        ParseOptions(options, &host);  // checks every key as a loader would
        std::string note;
        const uint64_t bytes = DefaultMemoryBudget(
            ReadAvailableMemory(host.meminfo_path, host.cgroup_root, host.proc_self_cgroup), &note);
        return py::make_tuple(bytes, note);
      },
      py::arg("options"),
      "(bytes, note): csrc/common/cpu_budget.h's DefaultMemoryBudget for these loader options.");
  m.def(
      "plan_slots",
      [](uint64_t slot_bytes, int batch_size, uint64_t budget, bool budget_given, const std::string& budget_note,
         uint64_t available, int prefetch_batches, bool auto_prefetch) {
        // The slot rule for a loader whose batches are not native slots (clip batches).
        SlotRequest request;
        request.slot_bytes = static_cast<size_t>(slot_bytes);
        request.batch_size = batch_size;
        request.budget = budget;
        request.budget_given = budget_given;
        request.budget_note = budget_note;
        request.available = available;
        request.prefetch_batches = prefetch_batches;
        request.auto_prefetch = auto_prefetch;
        absl::StatusOr<SlotPlan> plan = PlanSlots(request);
        ThrowIfError(plan.status());
        py::dict d;
        d["budget"] = plan->budget;
        d["max_slots"] = plan->max_slots;
        d["depth"] = plan->depth;
        d["prefetch_cap"] = plan->prefetch_cap;
        d["note"] = plan->note;
        return d;
      },
      py::arg("slot_bytes"), py::arg("batch_size"), py::arg("budget"), py::arg("budget_given"),
      py::arg("budget_note"), py::arg("available"), py::arg("prefetch_batches"), py::arg("auto_prefetch"),
      "csrc/pipeline/slot_pool.h's PlanSlots: {budget, max_slots, depth, prefetch_cap, note}; ValueError "
      "naming max_memory and the bytes needed when fewer than 2 slots fit.");
  m.def(
      "replace_candidates",
      [](uint64_t sample_seed, int64_t count) {
        // on_error="replace"'s substitutes for a failed row, in the order the native loader tries them.
        std::vector<int64_t> out;
        if (count <= 0) return out;
        const uint64_t attempts = ReplaceAttempts(count);
        out.reserve(attempts);
        for (uint64_t a = 0; a < attempts; ++a) out.push_back(ReplaceCandidate(sample_seed, a, count));
        return out;
      },
      py::arg("sample_seed"), py::arg("count"),
      "The samples (0..count-1) on_error='replace' tries, in order, for a failed row of this sample seed "
      "(csrc/pipeline/epoch.h's ReplaceCandidate; the failed sample itself is to be passed over).");
  m.def(
      "plan_threads",
      [](int usable, int training, const std::string& training_source, int fixed_readers) {
        // The thread rule for a share of CPUs (a rank's, on a machine several ranks share).
        CpuBudget budget;
        budget.affinity_cpus = std::max(1, usable);
        const ThreadPlan plan =
            PlanThreads(budget, TrainingThreads{training, training_source}, fixed_readers);
        py::dict d;
        d["decode_threads"] = plan.decode;
        d["reader_threads"] = plan.readers;
        d["usable_cpus"] = plan.usable;
        d["reserved_cpus"] = plan.reserved;
        d["reason"] = plan.reason;
        return d;
      },
      py::arg("usable"), py::arg("training"), py::arg("training_source"),
      py::arg("fixed_readers") = 0,
      "csrc/common/cpu_budget.h's PlanThreads for `usable` CPUs (training: the training loop's "
      "threads, -1 when not set explicitly).");
}

// The node as `ringloader doctor` and a rank's placement see it (numa/topology.h,
// common/cpu_budget.h, io/reader.h); every path is a parameter so tests fake the trees.
void BindHostProbes(py::module_& m) {
  m.def(
      "numa_nodes",
      [](const std::string& sysfs_root) {
        absl::StatusOr<NumaTopology> t = NumaTopology::Read(sysfs_root);
        ThrowIfError(t.status());
        py::list nodes;
        for (const NumaNode& n : t->nodes()) nodes.append(py::make_tuple(n.id, FormatCpuList(n.cpus)));
        return nodes;
      },
      py::arg("sysfs_root") = "/sys", "[(node id, its CPU list '0-3,8-11')] from sysfs; [] without NUMA.");
  m.def(
      "pci_numa_node",
      [](const std::string& sysfs_root, const std::string& bus_id) {
        absl::StatusOr<NumaTopology> t = NumaTopology::Read(sysfs_root);
        ThrowIfError(t.status());
        return py::make_tuple(NormalizePciBusId(bus_id), t->NodeOfPciDevice(bus_id));
      },
      py::arg("sysfs_root"), py::arg("bus_id"),
      "(canonical bus id, NUMA node or -1 when unknown) of a PCI device such as a GPU.");
  m.def(
      "share_of_cpus",
      [](const std::string& cpus, int index, int count) {
        absl::StatusOr<std::vector<int>> list = ParseCpuList(cpus);
        ThrowIfError(list.status());
        return FormatCpuList(ShareOfCpus(*list, index, count));
      },
      py::arg("cpus"), py::arg("index"), py::arg("count"),
      "numa/topology.h's ShareOfCpus on a CPU list: part `index` of `count` (a rank's CPUs).");
  m.def(
      "cpu_quota",
      [](const std::string& cgroup_root, const std::string& proc_self_cgroup) {
        absl::StatusOr<CpuQuota> q = ReadCpuQuota(cgroup_root, proc_self_cgroup);
        ThrowIfError(q.status());
        return py::make_tuple(q->cpus, q->cpus > 0 ? RoundCpuQuota(q->cpus) : 0, q->source);
      },
      py::arg("cgroup_root") = "/sys/fs/cgroup", py::arg("proc_self_cgroup") = "/proc/self/cgroup",
      "(CPUs, rounded CPUs, where) of the cgroup CPU quota; CPUs 0 when there is none.");
  m.def(
      "available_memory",
      [](const std::string& meminfo, const std::string& cgroup_root, const std::string& proc_self_cgroup) {
        const AvailableMemory a = ReadAvailableMemory(meminfo, cgroup_root, proc_self_cgroup);
        return py::make_tuple(a.bytes, a.source);
      },
      py::arg("meminfo") = "/proc/meminfo", py::arg("cgroup_root") = "/sys/fs/cgroup",
      py::arg("proc_self_cgroup") = "/proc/self/cgroup",
      "(bytes, where) this process may still use: MemAvailable capped by the cgroup memory limit.");
  m.def(
      "io_uring_refusal",
      [] {
        std::string why;
        {
          py::gil_scoped_release release;
          absl::StatusOr<std::unique_ptr<Reader>> r = MakeUringReader(4);
          if (!r.ok()) why = std::string(r.status().message());
        }
        return why;
      },
      "Why io_uring_setup is refused here (seccomp, kernel), or '' when it works: the probe the "
      "readers' io='auto' fallback to pread makes.");
}

// The transform chain's rules (the stage order, a batchable size, what fuses) and the decode
// level fast_decode names.
void BindChainRules(py::module_& m) {
  m.def(
      "check_transform",
      [](py::list steps, size_t first) -> py::object {
        const std::string why = StageOrderError(ParseSteps(steps), first);
        return why.empty() ? py::none() : py::object(py::str(why));
      },
      py::arg("steps"), py::arg("first") = 0,
      "Why steps[first:] cannot follow steps[:first] in one native chain (the stage order the "
      "loader enforces), or None. Bad step dicts raise.");
  m.def(
      "fixed_size",
      [](py::list steps) {
        absl::StatusOr<TransformPipeline> p =
            TransformPipeline::Create(ParseSteps(steps), DType::kFloat32, Layout::kCHW, true);
        ThrowIfError(p.status());
        return p->fixed_size();
      },
      py::arg("steps"),
      "True when the chain's output size does not depend on the input image (samples can be "
      "batched). Invalid chains raise ValueError.");
  m.def(
      "fuses",
      [](py::list steps, size_t i) {
        absl::StatusOr<TransformPipeline> p =
            TransformPipeline::Create(ParseSteps(steps), DType::kUint8, Layout::kCHW, true);
        return p.ok() && i < p->image_begin();
      },
      py::arg("steps"), py::arg("i"),
      "Whether steps[i] fuses into the chain's one resample (TransformPipeline::Create: a pad "
      "with a zero fill, or another constant fill that is the output's one padding with no "
      "resize after it, painted by the render), so boxes follow it; False for a chain Create "
      "refuses. Bad step dicts raise.");
  m.def(
      "step_kinds",
      [] {
        py::list kinds;
        for (const StepKindInfo& info : StepKinds()) {
          py::list params;
          for (std::string_view key : info.params) params.append(py::str(key.data(), key.size()));
          kinds.append(py::make_tuple(info.key, info.name, params));
        }
        return kinds;
      },
      "[(kind, torchvision's class, [parameter keys])]: every native step kind as its one "
      "declaration (transform/step_kinds.cc) states it; the keys a step dict of that kind may hold.");
  m.def(
      "fast_decode_level", [](const py::handle& value) { return FastDecodeName(FastDecodeArg(value)); },
      py::arg("value"),
      "The fast_decode level `value` names: 'off' (False), 'scale' (True) or 'fastest'; "
      "ValueError for anything else.");
}

// The seeds of the per-sample augmentation draws.
void BindSeeds(py::module_& m) {
  m.def("row_key", &RowKey, py::arg("index"), py::arg("position"),
        "The seed key of dataset index `index` at `position` of an epoch's order.");
  m.def("sample_seed", &SampleSeed, py::arg("seed"), py::arg("epoch"), py::arg("key"),
        "The augmentation seed of the sample with key `key` (row_key) in `epoch` of a loader "
        "seeded with `seed`.");
  m.def("mix64", &Mix64, py::arg("x"), "splitmix64's finaliser, which every native seed goes through.");
}

// The loader's verdict over a measured window.
void BindVerdict(py::module_& m) {
  m.def(
      "judge_loader",
      [](double seconds, double read_busy, double decode_busy, int reader_threads, int decode_threads,
         double consumer_wait, bool next_epoch_beside, int64_t errors, int64_t batches,
         std::string last_error, int hardware_threads, std::string knobs) {
        VerdictInput in;
        in.seconds = seconds;
        in.read_busy = read_busy;
        in.decode_busy = decode_busy;
        in.read_threads = reader_threads;
        in.decode_threads = decode_threads;
        in.consumer_wait = consumer_wait;
        in.next_epoch_beside = next_epoch_beside;
        in.errors = errors;
        in.batches = batches;
        in.last_error = std::move(last_error);
        in.hardware_threads = hardware_threads;
        in.knobs = std::move(knobs);
        const LoaderVerdict v = JudgeLoader(in);
        py::dict out;
        out["bottleneck"] = v.bottleneck;
        out["label"] = v.label;
        out["evidence"] = v.evidence;
        out["read_busy"] = v.read_share;
        out["decode_busy"] = v.decode_share;
        out["consumer_wait_fraction"] = v.wait_fraction;
        return out;
      },
      py::kw_only(), py::arg("seconds"), py::arg("read_busy"), py::arg("decode_busy"),
      py::arg("reader_threads"), py::arg("decode_threads"), py::arg("consumer_wait"),
      py::arg("next_epoch_beside"), py::arg("errors"), py::arg("batches"), py::arg("last_error"),
      py::arg("hardware_threads"), py::arg("knobs"),
      "Which stage limited the loader over a window of `seconds` (pipeline/verdict.h, the "
      "native benchmark's rule): a dict of bottleneck, label, evidence and the shares compared "
      "(read_busy, decode_busy per thread; consumer_wait_fraction).");
}

}  // namespace

void BindRules(py::module_& m) {
  BindImageOpHooks(m);
  BindThreadPlans(m);
  BindHostProbes(m);
  BindChainRules(m);
  BindSeeds(m);
  BindVerdict(m);
}

}  // namespace ringloader
