// LibTorch objectives: image classifiers on Fashion-MNIST (or MNIST) trained
// with early stopping, registered as the objective type
// "torch.fashion_mnist".
//
// This header does not include LibTorch; everything that needs it lives in
// objectives/torch_fashion_mnist.cpp (library hpsearch_torch).
//
// The objective section of space.json (every field optional):
//
//   "objective": {
//     "type": "torch.fashion_mnist",
//     "model": "mlp",                 // "mlp" or "cnn"
//     "data_dir": "/usr/share/datasets/fashion-mnist",
//     "train_subset": 0,              // train on this many images (0 = all)
//     "val_fraction": 0.1,            // part of the training set held out
//     "max_epochs": 10,
//     "early_stopping": {"patience": 3, "min_delta": 0.0},
//     "metric": "val_loss",           // or "val_accuracy"; default: from
//                                     // study.direction (minimize: val_loss)
//     "seed": 0,                      // split seed, base of per-trial seeds
//     "eval_batch_size": 1000,        // images per forward pass when scoring
//     "checkpoints": true,            // save the best epoch's weights (below)
//     "checkpoint_dir": "",           // "" = <log_dir>/checkpoints
//     "process_group_timeout_s": 60   // several processes: see below
//   }
//
// Data parallel training (issue #45; docs "Multi-process trials"): a trial
// with several ranks (space.json's "resources": {"processes": N}; the
// runner sets Trial::ranks() with world_size N > 1) trains one model on N
// processes with LibTorch's c10d (objectives/torch_distributed.h: a
// TCPStore served by rank 0 at master_addr:master_port, ProcessGroupGloo
// on the CPU, ProcessGroupNCCL on a GPU when LibTorch has it). The
// param batch_size is the global batch: each batch of the epoch's shuffled
// order (the same order on every rank) is split into N contiguous shards
// (rank r: images [B*r/N, B*(r+1)/N) of the batch's B), each rank computes
// the mean loss of its shard, and the gradients, weighted by each shard's
// share of the batch, are summed over the ranks (one flat all-reduce per
// batch), so every rank steps with the gradient of the batch's mean loss,
// as one process would (up to floating-point rounding); the learning rate
// and scale_with therefore apply to the global batch as without ranks.
// Rank 0's parameters and buffers are broadcast before the first epoch.
// Training and validation losses are summed over the ranks' shards (the
// validation set is split into N parts), so every rank has the same
// metrics. After each epoch rank 0 saves the training state and reports
// (only rank 0 has the checkpoint folder and reports: the runner drops the
// other ranks' reports and results), and its decision (continue, early
// stop, pruned, diverged) is broadcast with a digest (XXH3) of every rank's
// parameters: every rank ends at the same epoch the same way, and ranks
// whose parameters differ end the trial with Error("data parallel
// training: the parameters of rank R differ from rank 0's after epoch E").
// Rank 0 records the user attr "ranks_in_sync_epochs" (the epochs after
// which every rank's parameters were checked identical) and "processes".
// On a retry rank 0 loads the training state (see "Resume") and sends it
// to the other ranks (a broadcast of the file's bytes), so every rank
// continues from rank 0's checkpoint. Dropout: rank 0 draws its masks as a
// single process does; rank r > 0 reseeds its dropout generator at each
// epoch from the trial's seed, r and the epoch. Only rank 0 writes the
// best-epoch checkpoint file. A rank waits at most process_group_timeout_s
// seconds (default 60; > 0) for the others to join the group and in each
// collective operation; a rank whose peers are lost fails with
// Error("data parallel training, rank R of N: <operation> failed (a rank
// was lost, or did not reach it within T s): ...") (at once when a peer's
// process died: its connection closes); before it throws, it waits (at
// most process_group_timeout_s) for the runner to stop the trial
// (Trial::should_prune() throwing Interrupted), so that a trial whose
// peer's worker was lost ends as a lost rank, which the coordinator
// retries, rather than as an error of the objective. The worker's CPU threads
// (ObjectiveContext::threads) are per rank.
//
// Checkpoints (as Keras' ModelCheckpoint(save_best_only=True) or Ray Tune's
// trial checkpoints): with "checkpoints" true (the default) a trial saves
// its model's weights each time its validation metric improves (overwriting
// the file) to <checkpoint_dir>/trial-<number>.pt, a LibTorch archive of the
// module's parameters and buffers (written to a new temporary file opened
// with O_EXCL | O_NOFOLLOW, then renamed into place; mode 0600 in a folder
// created 0700; OwnerOnlyFolder in search/private_files.h). The folder must
// be owned by the worker's user, writable by no one else and not a symbolic
// link: otherwise a named checkpoint_dir is a ConfigError naming
// objective.checkpoint_dir, the default folder a warning (no checkpoints).
// The default folder is
// <log_dir>/checkpoints, log_dir being ObjectiveContext::log_dir
// (`hpsearch run`: <storage folder>/<study>.logs); with no log_dir and no
// checkpoint_dir no checkpoints are written. A relative checkpoint_dir is
// relative to the worker's working folder. A COMPLETE trial records the
// file's absolute path as user attr "checkpoint"; a trial that ends PRUNED
// or FAIL (an exception of the objective) deletes its file, so the folder
// holds one file per finished trial (4 bytes per parameter: MLP
// 784-512-512-10 2.7 MB; CNN with 8 / 16 / 32 channels 0.43 / 0.84 / 1.7 MB).
// A worker killed mid-trial (or a study interrupted) may leave its file.
// The post-study test-set scoring loads the best trial's checkpoint instead
// of retraining it (see score_best_trial_on_test_set below). A file that
// cannot be written (disk full) is a warning and that trial goes on without
// a checkpoint.
//
// Resume (long trials, search/checkpoints.h; like Ray Tune's trial
// checkpoints and Lightning's ckpt_path): when the runner gives the trial a
// checkpoint folder (Trial::checkpoint_dir() not empty: a Study with
// StudyOptions::checkpoint_root, `hpsearch run`), each epoch's full
// training state is saved there, after the epoch's validation and BEFORE
// its report (the rule for programs; Trial::report then snapshots the
// folder), as one LibTorch archive (torch::serialize, the format of
// torch::save) named "training_state.pt", replaced atomically (a temporary
// file, mode 0600, renamed into place: OwnerOnlyFolder::replace_file; a
// folder that breaks the owner-only rule is a warning and nothing is
// saved). Its records:
//
//   format                int64 1 (another format is not loaded)
//   fingerprint           string: model, every hyperparameter after
//                         defaults and scale_with, the trial's seed, the
//                         number of training and validation images
//   epoch                 int64, the epoch just trained (1-based)
//   model                 the module's parameters and buffers (Module::save)
//   optimizer             the optimizer's state (Optimizer::save: Adam's
//                         moments and step count, SGD's momentum buffers,
//                         ...; its param groups hold the learning rate,
//                         which is constant: there is no schedule)
//   rng_init, rng_shuffle, rng_dropout
//                         uint8 states of the trial's generators (initial
//                         weights, batch order, dropout masks on the CPU);
//                         rng_device: the GPU's generator (dropout on a GPU)
//   have_best, best_value, best_epoch, best_train_loss, best_val_loss,
//   best_val_accuracy     best-so-far (float64 records: bit-exact)
//   reference, since_improvement
//                         early stopping's counters (see run_epochs())
//   best_weights          the best epoch's parameters and buffers
//                         ("size", then "0", "1", ... in Module order)
//
// Size: the weights about 4 bytes per parameter, times 2 (weights and best
// weights) plus the optimizer's buffers (Adam: 2 more; MLP 784-128-10:
// 0.4 MB per copy, 1.6 MB in all); one write per epoch (milliseconds).
//
// On a retry (Trial::resume_step() = k: the folder is as it was when
// epoch k was reported), the file is loaded and training continues with
// epoch k + 1: the model, optimizer, generators, best-so-far, early
// stopping counters and best weights are those of epoch k, epochs 1..k are
// neither trained nor reported again (they are already the trial's
// intermediate values), the best-epoch checkpoint file above is written
// from the restored best weights, and a run whose epoch k had ended it
// (patience exhausted, max_epochs reached) ends at once. The value, the
// user attrs (best_epoch, epochs_run, stopped_early, val_loss, ...) and
// the final and best weights are then those of a trial that never stopped:
// on the CPU with the same thread count, bit for bit (the test
// TorchResume.InterruptedAndResumedEndsBitIdentical). Nondeterminism
// caveats: on a GPU, cuDNN/cuBLAS kernels are not deterministic and the
// dropout masks come from the device's generator, shared by the process;
// with another thread count (or on another machine or LibTorch build) the
// reductions may round differently; a resume on another device than the
// one that saved is allowed (the tensors are mapped) but is not bit-exact.
//
// A file that cannot be used (missing, truncated, corrupted, of another
// format, written by another model or params, say another "hidden", a
// record missing or of the wrong shape, type or range, larger than six
// times the model's tensor bytes plus 1 MiB) is a warning "trial N:
// training state <path> not usable: <reason>; training from scratch ..."
// and the trial trains from epoch 1: the trial's intermediate values of
// epochs 1..k are kept (the reports of those epochs are refused as
// duplicates, Trial::report returning false, and the first values stay),
// and the value and attrs are those of the new run. A file of an earlier
// epoch than k (a failed save) resumes from that epoch: the epochs up to k
// are trained again and their reports refused as duplicates. A save that
// fails (disk full) is a warning (once per trial); the trial goes on and
// the folder keeps the previous epoch's state. Without a checkpoint folder
// (evaluate_on_test_set's retraining, a Study without checkpoint_root)
// nothing is saved or loaded. The "checkpoints" option above is about the
// best-epoch file only and does not turn this off.
//
// The params a trial may set (all optional; a param the space does not declare
// takes its default, an inactive conditional param too):
//
//   lr            float > 0, default 1e-3. With "scale_with" in the space
//                 (design.md) the sampled value is the base rate at the
//                 reference batch size; the rate used in training is
//                 lr * (batch_size / reference)^p, p = 0.5 ("sqrt") or 1
//                 ("linear"), stored as user attr "lr_effective".
//   batch_size    int >= 1, default 64
//   optimizer     "adam" (default), "adamw", "sgd", "rmsprop"
//   momentum      float in [0, 1); sgd and rmsprop; default 0.9 for sgd and
//                 0 for rmsprop
//   nesterov      bool, sgd only, default false; ignored when momentum is 0
//                 (LibTorch refuses Nesterov without momentum)
//   weight_decay  float >= 0, default 0 (L2 penalty; decoupled for adamw)
//   layers        int >= 1, MLP hidden layers, default 1
//   hidden        int >= 1, MLP hidden units per layer, default 128
//   activation    "relu" (default), "gelu", "tanh", "silu", "leaky_relu"
//   dropout       float in [0, 1), default 0; after every hidden layer (MLP)
//                 or before each fully connected layer (CNN)
//   channels      int >= 1, CNN channels of the first convolution (the second
//                 has twice as many), default 32
//   kernel_size   odd int >= 1, CNN convolution kernel, default 3
//
// A param of the space that the objective does not know, or whose
// distribution can produce a value outside the ranges above, is refused by
// validate (ConfigError "space.<param>: ...") before any trial runs.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "objectives/objective.h"
#include "search/json_util.h"
#include "search/search_space.h"
#include "search/study.h"

namespace hps {

// Registers "torch.fashion_mnist" with the objective registry. Idempotent.
// Its post-study hook (objectives/objective.h: AfterStudyHook, run by
// run_after_study() at the end of `hpsearch run`), named "test set
// evaluation", scores the best trial on the test set and stores
// test_accuracy, test_loss and test_scored_from ("checkpoint" or "retrain")
// as user attrs of that trial; a best trial that already has test_accuracy
// (scored by an earlier run) is not scored again. When the trial has a
// "checkpoint" attr it writes "Scoring the best trial (N) on the test set
// from its checkpoint <path>" and uses evaluate_checkpoint_on_test_set()
// (seconds); when that fails (no such file, as for a trial run by a worker
// on another machine; a corrupt or truncated file; a file refused by the
// rules of evaluate_checkpoint_on_test_set(); weights of another
// model; a validation accuracy that differs from the trial's recorded one
// by more than 0.002) it writes "Checkpoint not usable: checkpoint <path>:
// <reason>; retraining" (also logged as a warning) and falls back, as for a trial
// without a checkpoint, to "Scoring the best trial (N) on the test set by
// retraining it..." with evaluate_on_test_set() (as long as one trial).
void register_torch_objectives();

inline constexpr const char* kFashionMnistType = "torch.fashion_mnist";
inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

// The validation metric a trial reports and returns.
enum class TrainMetric {
  kValLoss,      // mean cross-entropy on the validation set (nats); minimize
  kValAccuracy,  // fraction of validation images classified right, [0, 1]; maximize
};
// "val_loss" / "val_accuracy".
const char* to_string(TrainMetric metric);

// Per-trial early stopping (the rule of Keras' EarlyStopping callback).
struct EarlyStoppingOptions {
  // Epochs without improvement after which training stops; 0 (default) never
  // stops early. Small values save time but can stop a slow starter.
  std::int64_t patience = 0;
  // An epoch improves when its metric beats the best so far by more than
  // this (absolute, in the metric's units; default 0: any improvement).
  double min_delta = 0.0;
};

// The parsed objective section.
struct FashionMnistConfig {
  std::string model = "mlp";                       // "mlp" or "cnn"
  std::string data_dir = kFashionMnistDefaultDir;  // the four IDX files (see idx.h)
  std::int64_t train_subset = 0;                   // images of the training part used; 0 = all
  double val_fraction = 0.1;                       // in (0, 1); the validation part is never subset
  std::int64_t max_epochs = 10;                    // >= 1
  EarlyStoppingOptions early_stopping;
  // Absent: derived from the study direction (val_loss when it is unknown).
  std::optional<TrainMetric> metric;
  std::uint64_t seed = 0;               // seed of the train/validation split and base of
                                        // the per-trial seeds
  std::int64_t eval_batch_size = 1000;  // images per forward pass when scoring; >= 1
  // Save each trial's best-epoch weights (see "Checkpoints" above). Default
  // true; costs one file write per improving epoch (milliseconds) and one
  // file per COMPLETE trial on disk.
  bool checkpoints = true;
  // Folder of the checkpoint files; "" (default) = <log_dir>/checkpoints.
  // Must not be empty when given.
  std::string checkpoint_dir;
  // Trials of several processes: seconds a rank waits for the others to
  // join and in each collective operation (see "Data parallel training").
  // Default 60, the default of resources.rendezvous_timeout_s; > 0. Longer
  // tolerates a slow rank 0 (its report and checkpoint are awaited after
  // each epoch); shorter fails a hung peer sooner.
  double process_group_timeout_s = 60.0;

  // Parses and validates the objective section and its fit with `space`
  // (the params above). Throws ConfigError naming "objective.<field>" or
  // "space.<param>"; does not touch the data files.
  static FashionMnistConfig from_json(const Json& objective, const SearchSpace& space);

  // The metric to use under `direction` (nullopt: unknown). Throws
  // ConfigError("objective.metric", ...) when the configured metric does not
  // fit the direction (val_loss must be minimized, val_accuracy maximized).
  TrainMetric resolve_metric(std::optional<StudyDirection> direction) const;
};

// The hyperparameters of one trial, after defaults and scale_with.
struct TrainingParams {
  std::string optimizer = "adam";
  double lr = 1e-3;            // as sampled (the base rate when scale_with applies)
  double lr_effective = 1e-3;  // the rate used in training
  std::int64_t batch_size = 64;
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  std::int64_t layers = 1;
  std::int64_t hidden = 128;
  std::string activation = "relu";
  double dropout = 0.0;
  std::int64_t channels = 32;
  std::int64_t kernel_size = 3;

  // Reads a trial's params (see the list at the top of this file), applying
  // `space`'s scale_with rules. Throws ConfigError("params.<name>", ...) for
  // a value out of range or of the wrong type.
  static TrainingParams from_params(const Params& params, const SearchSpace& space);
};

// Validation metrics after one epoch of training.
struct EpochMetrics {
  double train_loss = 0.0;    // mean cross-entropy over the epoch's batches (nats)
  double val_loss = 0.0;      // mean cross-entropy on the validation set (nats)
  double val_accuracy = 0.0;  // in [0, 1]
};

// What run_epochs() ended with.
struct TrainingOutcome {
  double best_value = 0.0;      // the best metric reached (the trial's value)
  std::int64_t best_epoch = 0;  // 1-based epoch of best_value
  EpochMetrics best;            // the metrics of best_epoch
  std::int64_t epochs_run = 0;  // epochs trained
  bool stopped_early = false;   // early stopping ended training
  bool diverged = false;        // a non-finite loss ended training
};

// The epoch loop's bookkeeping after an epoch: what a resumed trial must
// restore so that it ends as if it had never stopped (run_epochs()).
struct EpochLoopState {
  std::int64_t epoch = 0;       // epochs done (1-based: the step reported last)
  bool have_best = false;       // an epoch was reported (always true once one was)
  double best_value = 0.0;      // the best metric so far
  std::int64_t best_epoch = 0;  // its epoch
  EpochMetrics best;            // the metrics of best_epoch
  // Early stopping (Keras' rule): the value improvements are measured
  // against (it moves only on an improvement by more than min_delta), and
  // the epochs in a row without one.
  double reference = 0.0;
  std::int64_t since_improvement = 0;
};

// Resuming run_epochs() (issue #43, "Long trials" in docs): how the loop
// saves its state and where it continues.
struct EpochLoopResume {
  // Called after each epoch's bookkeeping (best-so-far, on_best, early
  // stopping counters) and BEFORE its report, with the state after that
  // epoch: save everything a retry needs here (the rule for programs: save
  // the checkpoint, then report the step). Exceptions propagate. Empty:
  // nothing is saved.
  std::function<void(const EpochLoopState& state)> save_state;
  // The state to continue from: epochs 1..from->epoch are not run or
  // reported again; the loop goes on with from->epoch + 1 (or ends at once
  // when that epoch had ended training: max_epochs reached, or patience
  // exhausted). nullopt (default): from epoch 1. Must have have_best.
  std::optional<EpochLoopState> from;
};

// What the epoch loop does after an epoch (run_epochs()): go on, stop
// (early stopping's patience is exhausted), end the trial as pruned (the
// pruner said so), or end it as diverged (a non-finite loss).
enum class EpochDecision : std::int64_t { kContinue = 0, kStop = 1, kPrune = 2, kDiverged = 3 };

// The epoch loop shared by the LibTorch objectives, independent of LibTorch.
//
// For epoch = 1, 2, ..., max_epochs: m = run_epoch(epoch), whose metric
// value is v (m.val_loss or m.val_accuracy); when v is the best so far
// (lower for val_loss, higher for val_accuracy) on_best(epoch) is called
// (e.g. to keep the weights); early stopping's counters are updated;
// resume.save_state is called (below); then v is reported to `trial` at
// step = epoch; when the pruner answers prune, training stops and
// TrialPruned is thrown (after the user attrs below are set). An epoch
// improves (for early stopping) when v beats the reference by more than
// early.min_delta. After early.patience epochs in a row without improvement training stops
// (patience 0: never). A non-finite train or validation loss ends training
// as diverged (it is not reported): the best epoch so far is kept, or, at
// epoch 1, Error("diverged: ...") is thrown.
//
// Before returning or throwing TrialPruned, sets the user attrs best_epoch,
// val_loss, val_accuracy (of the best epoch, whichever metric is used),
// train_loss, epochs_run and stopped_early on `trial`. `trial` may be null
// (no reports, no pruning, no attrs). Exceptions of run_epoch propagate.
//
// With `resume` (see EpochLoopResume): resume.save_state(state) is called
// after each reported epoch's bookkeeping and before its report, and a
// loop given resume.from continues after that epoch with its best-so-far
// and early stopping counters, so that the outcome and the attrs are those
// of a loop that never stopped. Throws Error when resume.from has no best
// epoch or an epoch < 1.
//
// With `agree` (data parallel training: every rank of a trial runs this
// loop): after each epoch (its report and pruning question included, or
// at once when the loss is not finite) the loop calls agree(epoch, local)
// with its own decision, and follows the decision agree returns (rank 0's,
// broadcast), so that every rank ends at the same epoch and the same way
// (none left waiting in a collective operation): kStop sets stopped_early,
// kPrune throws TrialPruned, kDiverged ends as above. Exceptions of agree
// propagate. Empty (default): the loop follows its own decision.
TrainingOutcome run_epochs(
    Trial* trial, std::int64_t max_epochs, TrainMetric metric, const EarlyStoppingOptions& early,
    const std::function<EpochMetrics(std::int64_t epoch)>& run_epoch,
    const std::function<void(std::int64_t epoch)>& on_best = {}, const EpochLoopResume& resume = {},
    const std::function<EpochDecision(std::int64_t epoch, EpochDecision local)>& agree = {});

// The Fashion-MNIST objective, as the registry's make() builds it. Loads the
// data (once per process and data_dir, kept for every later call), sets
// LibTorch's CPU threads to context.threads, and picks the device:
// context.device "cuda:N" when LibTorch has CUDA and a GPU is available,
// else the CPU (with a warning if CUDA was asked for).
//
// Each call of the objective trains a model from its params, seeded from
// config.seed and the params (not the trial number), so the same params
// give the same result on the same machine, thread count and device: the
// initial weights, the batch order and (on the CPU) the dropout masks come
// from generators of the trial's own, so trials running concurrently in one
// process do not disturb each other (on a GPU, dropout draws from the
// device's generator and only one trial at a time per process is
// reproducible). With a checkpoint folder from the runner
// (Trial::checkpoint_dir()) each epoch's training state is saved there and
// a retry continues from it (see "Resume" at the top). Returns the best
// metric reached (run_epochs()); sets the user attrs of run_epochs() plus
// lr_effective (the rate used) and n_train (training images).
//
// Errors: ConfigError for a bad config (as from_json) or bad params; Error
// naming the file for missing or malformed data; a trial whose training
// runs out of memory (c10::OutOfMemoryError, a c10::Error saying "out of
// memory" or "can't allocate memory" as LibTorch's CPU allocator does,
// std::bad_alloc) throws Error("oom"), so the trial ends FAIL with reason
// "oom" and the process can run the next trial. Other LibTorch errors throw
// Error("libtorch: <message>").
Objective make_fashion_mnist_objective(const Json& config, const SearchSpace& space,
                                       const ObjectiveContext& context = {});

// The held-out test set score of a set of params.
struct TestEvaluation {
  double test_accuracy = 0.0;   // in [0, 1], on the 10,000 test images
  double test_loss = 0.0;       // mean cross-entropy (nats)
  std::int64_t best_epoch = 0;  // epoch whose weights were scored
  double val_accuracy = 0.0;    // the retrained model's validation accuracy at best_epoch
  double val_loss = 0.0;
  // "retrain" (evaluate_on_test_set) or "checkpoint"
  // (evaluate_checkpoint_on_test_set).
  std::string scored_from = "retrain";
  // The attrs to store with the trial: test_accuracy, test_loss,
  // test_scored_from.
  Json to_user_attrs() const;
};

// Scores `params` on the test split, once, at the end of a study (the test
// set is never seen by the search) by retraining: the same seed, data and params train
// a model again (early stopping as configured, up to max_epochs), its
// weights at the best validation epoch are kept and scored on the test
// split. With the thread count and device of the trial the model is the
// trial's own; otherwise floating-point reassociation can make it differ
// slightly. Takes as long as one trial. `config` is the objective section of
// the study (type torch.fashion_mnist).
//
// Throws as make_fashion_mnist_objective(), and ConfigError when `config` is
// not a torch.fashion_mnist section.
TestEvaluation evaluate_on_test_set(const Json& config, const SearchSpace& space,
                                    const Params& params, const ObjectiveContext& context = {});

// Scores the weights of the checkpoint file `path` (written by a trial of
// the objective `config` with `params`, see "Checkpoints" above) on the
// test split, without training: builds the model of `params`, loads the
// file's parameters and buffers into it (each must exist with the model's
// shape), and scores it on the validation and test splits. best_epoch is the
// epoch stored in the file; val_accuracy and val_loss are recomputed; and
// scored_from is "checkpoint".
//
// The file is read through OwnerOnlyFolder::read_file (search/private_files.h)
// and parsed from memory: `path` must be absolute, and the file and its
// folder owned by this process's user, writable by no one else, not
// symbolic links; the file a regular one of at most twice the model's
// tensor bytes plus 1 MiB (a larger one is not read).
//
// Throws Error("checkpoint <path>: <reason>") when the file is missing,
// unreadable, refused by those rules, corrupt, or holds the weights of
// another model (shapes or dtypes differ); otherwise as
// evaluate_on_test_set().
TestEvaluation evaluate_checkpoint_on_test_set(const Json& config, const SearchSpace& space,
                                               const Params& params, const std::string& path,
                                               const ObjectiveContext& context = {});

// Whether `config` (an objective section) is one of this library's types.
bool is_torch_objective(const Json& config);

// Hooks for tests; not for production use.
namespace torch_testing {
// Called before every training batch with the 1-based epoch and the 0-based
// batch index; it may throw (e.g. std::bad_alloc to simulate an allocation
// failure). Pass {} to remove. Not thread-safe: set it while no trial runs.
void set_batch_hook(std::function<void(std::int64_t epoch, std::int64_t batch)> hook);
// Drops the process-wide data cache (for tests of loading).
void clear_data_cache();
// Number of data sets (data_dir and split) loaded from disk so far.
std::int64_t data_loads();
}  // namespace torch_testing

}  // namespace hps
