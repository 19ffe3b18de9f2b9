#pragma once
// A one-line progress display for training loops, printed by rank 0 only: a bar redrawn in place
// on a terminal, or a line every tenth of the epoch when the output is a log file.

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace distop::train {

class Progress {
 public:
  Progress(bool enabled, int epoch, int epochs, std::int64_t steps)
      : enabled_(enabled),
        tty_(isatty(fileno(stderr)) != 0),
        epoch_(epoch),
        epochs_(epochs),
        steps_(steps),
        start_(std::chrono::steady_clock::now()) {}

  // After each step: the running mean loss and accuracy of the epoch so far (no accuracy for a
  // loss without classes, such as a contrastive one).
  void update(std::int64_t step, std::int64_t samples, double loss,
              std::optional<double> accuracy) {
    if (!enabled_) return;
    const bool last = step == steps_;
    const std::int64_t tenth = steps_ >= 10 ? steps_ / 10 : 1;
    if (!tty_ && !last && step % tenth != 0) return;
    const double secs = seconds();
    const int width = 24;
    const int filled = steps_ > 0 ? static_cast<int>(width * step / steps_) : width;
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(static_cast<std::size_t>(width), '.');
    char acc[32] = "";
    if (accuracy) std::snprintf(acc, sizeof acc, "  acc %5.2f%%", 100.0 * *accuracy);
    std::fprintf(stderr, "%sepoch %d/%d [%s] %lld/%lld  loss %.4f%s  %.0f samples/s%s",
                 tty_ ? "\r" : "", epoch_, epochs_, bar.c_str(), static_cast<long long>(step),
                 static_cast<long long>(steps_), loss, acc,
                 secs > 0 ? static_cast<double>(samples) / secs : 0.0, tty_ && !last ? "" : "\n");
    std::fflush(stderr);
  }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  bool enabled_;
  bool tty_;
  int epoch_;
  int epochs_;
  std::int64_t steps_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace distop::train
