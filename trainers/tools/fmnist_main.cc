// cohort-train-fmnist: the Fashion-MNIST CNN, data parallel under cohortrun (or torchrun).
#include <CLI/CLI.hpp>

#include "cohort/train/fmnist_trainer.h"
#include "cohort/train/metrics.h"
#include "cohort/train/worker.h"
#include "common_options.h"

namespace {

using namespace cohort::train;

struct Cli {
  FmnistOptions o;
  WorkerOptions w;
  std::string summary;
  std::string precision;    // --precision ("": the device's default)
  double min_accuracy = 0;  // exit status 3 below it
};

void define_options(CLI::App& app, Cli& c) {
  app.add_option("--data", c.o.data_dir,
                 "directory with the Fashion-MNIST IDX files (.gz or plain)");
  app.add_option("--epochs", c.o.epochs, "passes over the training set")->capture_default_str();
  app.add_option("--batch-size", c.o.batch_size, "images per rank per step")->capture_default_str();
  app.add_option("--lr", c.o.lr, "SGD learning rate")->capture_default_str();
  app.add_option("--momentum", c.o.momentum, "SGD momentum")->capture_default_str();
  app.add_flag("--nesterov,!--no-nesterov", c.o.nesterov,
               "Nesterov momentum (default on; --no-nesterov for plain momentum)");
  app.add_option("--lr-schedule", c.o.lr_schedule, "constant, or cosine (to 0 at the last step)")
      ->capture_default_str();
  app.add_option("--warmup-steps", c.o.warmup_steps, "linear warm-up steps of the cosine schedule");
  app.add_option("--ema-decay", c.o.ema_decay,
                 "evaluate a moving average of the weights with this decay (0: the weights)")
      ->capture_default_str();
  app.add_option("--seed", c.o.seed, "seed of the weights and the data order")
      ->capture_default_str();
  app.add_option("--max-steps", c.o.max_steps, "stop after this many steps (0: all epochs)");
  app.add_option("--train-limit", c.o.train_limit, "use only the first N training images");
  app.add_option("--test-limit", c.o.test_limit, "evaluate on the first N test images");
  add_common_options(app, c.o, c.w, c.summary, c.precision);
  // The option's former spelling, before it took the GPT trainer's; hidden from --help.
  app.add_option("--eval-every", c.o.eval_interval, "former spelling of --eval-interval")
      ->group("");
  app.add_option("--min-test-accuracy", c.min_accuracy,
                 "exit with status 3 when the final test accuracy is lower (checks, CI)");
}

int real_main(int argc, char** argv) {
  Cli c;
  CLI::App app{"Train the Fashion-MNIST CNN, data parallel (launch with cohortrun)"};
  define_options(app, c);
  // --version, exit status 2 on usage errors, typed placeholders (cohort/base/cli11.h).
  cohort::cli::apply(app, trainer_conventions("cohort-train-fmnist"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cohort::cli::exit_status(app, e);
  }
  c.o.precision = precision_option(c.precision);
  auto worker = Worker::start(c.w);
  c.o.on_step = worker->step_hook();
  if (worker->rank() != 0) c.o.out = nullptr;
  const FmnistResult r = train_fmnist(c.o, worker->device(), worker->comm());
  if (worker->rank() == 0) {
    std::printf(
        "final: test accuracy %.2f%%  test loss %.4f  %.0f samples/s  %lld steps  "
        "(%.1f%% of step time in the gradient allreduce)\n",
        100.0 * r.test_accuracy, r.test_loss, r.samples_per_s, static_cast<long long>(r.steps),
        r.train_seconds > 0 ? 100.0 * r.comm_seconds / r.train_seconds : 0.0);
    if (c.o.ema_decay > 0) {
      std::printf("       (of the weight average, decay %g; the weights themselves: %.2f%%)\n",
                  c.o.ema_decay, 100.0 * r.raw_test_accuracy);
    }
    write_summary(c.summary, {{"model", "fmnist"},
                              {"world_size", worker->world_size()},
                              {"steps", r.steps},
                              {"start_step", r.start_step},
                              {"test_accuracy", r.test_accuracy},
                              {"test_loss", r.test_loss},
                              {"raw_test_accuracy", r.raw_test_accuracy},
                              {"ema_decay", c.o.ema_decay},
                              {"train_loss", r.last_loss},
                              {"samples_per_s", r.samples_per_s},
                              {"device", worker->device().describe()},
                              {"precision", precision_name(r.precision)},
                              {"loss_scale", r.loss_scale},
                              {"skipped_steps", r.skipped_steps},
                              {"launches_per_step", r.launches_per_step},
                              {"gradient_path", worker->comm().describe()},
                              {"train_seconds", r.train_seconds},
                              {"comm_seconds", r.comm_seconds}});
    if (r.test_accuracy < c.min_accuracy) {
      std::fprintf(stderr, "test accuracy %.4f is below --min-test-accuracy %.4f\n",
                   r.test_accuracy, c.min_accuracy);
      return 3;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cohort::train::run_worker_main(argc, argv, real_main);
}
