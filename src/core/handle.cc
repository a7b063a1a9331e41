// Handle (include/kolo/handle.h) and HandleState (handle_state.h).
#include "core/handle_state.h"

namespace kolo {

namespace detail {

void HandleState::mark_started() {
  std::lock_guard<std::mutex> lock(mu);
  times.started = Handle::Clock::now();
}

void HandleState::complete(ErrorCode c, std::string m) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (done) return;
    code = c;
    message = std::move(m);
    times.finished = Handle::Clock::now();
    done = true;
    finished.store(true, std::memory_order_release);
  }
  cv.notify_all();
}

}  // namespace detail

namespace {
detail::HandleState& must(const std::shared_ptr<detail::HandleState>& s) {
  if (!s) throw Error(ErrorCode::kInvalidArgument, "use of an empty kolo::Handle");
  return *s;
}
}  // namespace

const std::string& Handle::name() const { return must(state_).name; }

bool Handle::poll() const {
  auto& s = must(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.done;
}

bool Handle::wait_for(std::chrono::milliseconds timeout) const {
  auto& s = must(state_);
  std::unique_lock<std::mutex> lock(s.mu);
  return s.cv.wait_for(lock, timeout, [&] { return s.done; });
}

void Handle::wait() const {
  auto& s = must(state_);
  if (!s.finished.load(std::memory_order_acquire)) {
    if (auto helper = s.helper.lock()) helper->help(s);
  }
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait(lock, [&] { return s.done; });
  if (s.code != ErrorCode::kOk) throw_error(s.code, s.message);
}

bool Handle::ok() const { return error_code() == ErrorCode::kOk; }

ErrorCode Handle::error_code() const {
  auto& s = must(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.code;
}

std::string Handle::error_message() const {
  auto& s = must(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.message;
}

const Tensor& Handle::output() const { return must(state_).output; }
Tensor& Handle::mutable_output() { return must(state_).output; }
const std::vector<std::int64_t>& Handle::received_splits() const {
  return must(state_).received_splits;
}
int Handle::last_joined_rank() const { return must(state_).last_joined_rank; }
void* Handle::device_event() const { return must(state_).device_event; }

Handle::Times Handle::times() const {
  auto& s = must(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.times;
}

void Handle::keep_alive(std::shared_ptr<void> owner) {
  auto& s = must(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  s.keep_alive = std::move(owner);
}

}  // namespace kolo
