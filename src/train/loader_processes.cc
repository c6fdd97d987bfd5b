// DataLoader workers made with fork(). Before forking, the parent maps
// prefetch_factor * num_workers batch slots of shared memory; it writes a
// batch's sample indices into a free slot and sends the slot's number to
// worker (batch % num_workers) over a socket pair; the worker fills the slot
// and answers. The parent copies the slot into the Batch, so the slot is free
// again at once. Sockets, not pipes: send(MSG_NOSIGNAL) turns a dead peer
// into an error code instead of a SIGPIPE that would kill the trainer.
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>

#include "core/check.h"
#include "core/checked.h"
#include "train/loader_internal.h"

namespace anvil::train {

namespace {

constexpr int64_t kAlign = 64;
constexpr int kPollMs = 100;  // how often a waiting parent checks that the worker is alive
constexpr auto kExitGrace = std::chrono::seconds(1);

struct Command {
  int64_t batch, rows, slot;
};

struct Result {
  int64_t batch;  // -1: the worker's worker_init failed
  int64_t slot;
  int32_t ok;
  int32_t kind;  // an ErrorKind when !ok
  char message[496];
};

Result failure(int64_t batch, int64_t slot, const Error& e) {
  Result r{};
  r.batch = batch;
  r.slot = slot;
  r.kind = static_cast<int32_t>(e.kind());
  std::strncpy(r.message, e.what(), sizeof r.message - 1);
  return r;
}

ErrorKind error_kind(int32_t kind) {
  const bool known = kind >= 0 && kind <= static_cast<int32_t>(ErrorKind::kInternal);
  return known ? static_cast<ErrorKind>(kind) : ErrorKind::kInternal;
}

bool send_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// False on end of file or an error.
bool recv_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

int64_t align_up(int64_t n) { return checked_add(n, kAlign - 1, "the data loader's slot size") / kAlign * kAlign; }

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

// Batch slots in memory shared with the workers: [indices | field 0 | field 1 ...].
class SharedSlots {
 public:
  SharedSlots(const BatchLayout& layout, int64_t batch_size, int64_t count) : count_(count) {
    int64_t offset = align_up(checked_mul(batch_size, int64_t{sizeof(int64_t)}, "the data loader's index slot"));
    for (int64_t row : layout.row_bytes) {
      field_offset_.push_back(offset);
      offset = checked_add(offset, align_up(checked_mul(row, batch_size, "a batch's bytes")), "a slot's bytes");
    }
    slot_bytes_ = offset;
    bytes_ = static_cast<size_t>(checked_mul(slot_bytes_, count, "the data loader's shared memory"));
    check_allocation(bytes_, fmt::format("the data loader's {} shared batch slots", count));
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ANVIL_CHECK(p != MAP_FAILED, ErrorKind::kOutOfMemory,
                "cannot map {} bytes of shared memory for the data loader: {}", bytes_, std::strerror(errno));
    base_ = static_cast<char*>(p);
  }
  ~SharedSlots() { munmap(base_, bytes_); }
  SharedSlots(const SharedSlots&) = delete;
  SharedSlots& operator=(const SharedSlots&) = delete;

  int64_t count() const { return count_; }
  int64_t* indices(int64_t slot) { return reinterpret_cast<int64_t*>(base_ + slot * slot_bytes_); }
  char* field(int64_t slot, size_t f) { return base_ + slot * slot_bytes_ + field_offset_[f]; }

 private:
  int64_t count_, slot_bytes_ = 0;
  size_t bytes_ = 0;
  std::vector<int64_t> field_offset_;
  char* base_ = nullptr;
};

class ProcessSource : public BatchSource {
 public:
  ProcessSource(std::shared_ptr<const Dataset> dataset, const LoaderOptions& o)
      : dataset_(std::move(dataset)),
        options_(o),
        layout_(batch_layout(*dataset_, o.batch_size)),
        slots_(layout_, o.batch_size, checked_mul(o.prefetch_factor, o.num_workers, "the data loader's slots")) {}
  ~ProcessSource() override { stop_workers(); }

  void begin(std::vector<int64_t> order, int64_t batches) override {
    // Results of an abandoned epoch may still be on their way: new workers
    // are simpler and safer than draining them.
    if (!pending_.empty() || !broken_.empty()) stop_workers();
    broken_.clear();
    order_ = std::move(order);
    batches_ = batches;
    dispatched_ = 0;
    free_slots_.clear();
    for (int64_t s = 0; s < slots_.count(); ++s) free_slots_.push_back(s);
    if (workers_.empty()) spawn();
    dispatch();
  }

  bool next(Batch& out) override {
    ANVIL_CHECK(broken_.empty(), ErrorKind::kInternal, "{}", broken_);
    if (pending_.empty()) return false;
    const auto [b, slot] = pending_.front();
    const Result r = receive(b);
    check_answer(r, b, slot);
    pending_.pop_front();
    Batch batch;
    std::exception_ptr error;
    try {
      if (!r.ok) throw Error(error_kind(r.kind), r.message);
      batch = copy_out(b, slot);
    } catch (...) {
      error = std::current_exception();
    }
    free_slots_.push_back(slot);  // before rethrowing: the batches after a failed one still come
    dispatch();
    if (error) std::rethrow_exception(error);
    out = std::move(batch);
    return true;
  }

 private:
  struct Worker {
    pid_t pid;  // -1 once reaped
    int fd;     // the parent's end of the socket pair
  };
  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  BatchLayout layout_;
  SharedSlots slots_;
  std::vector<Worker> workers_;
  std::vector<int64_t> order_;
  int64_t batches_ = 0, dispatched_ = 0;
  std::deque<std::pair<int64_t, int64_t>> pending_;  // (batch, slot) sent, in batch order
  std::vector<int64_t> free_slots_;
  std::string broken_;  // why the workers were stopped; next() throws it until begin()

  int64_t workers() const { return options_.num_workers; }

  void spawn() {
    for (int w = 0; w < workers(); ++w) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) spawn_failed("socketpair");
      const pid_t pid = fork();
      if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        spawn_failed("fork");
      }
      if (pid == 0) {
        // Only the standard streams and this worker's channel stay open: a
        // worker holding another channel's end (this loader's or another
        // loader's) would keep that worker from seeing its parent close it.
        const int fd = sv[1];
        if (fd > 3) close_range(3, static_cast<unsigned>(fd - 1), 0);
        close_range(static_cast<unsigned>(fd + 1), ~0U, 0);
        child_main(w, fd);
      }
      close(sv[1]);
      workers_.push_back({pid, sv[0]});
    }
  }

  [[noreturn]] void spawn_failed(const char* call) {
    const int e = errno;
    const size_t worker = workers_.size();
    stop_workers();
    fail(ErrorKind::kOutOfMemory, "data loader: {} for worker process {} failed: {}", call, worker, std::strerror(e));
  }

  // The worker process. It never returns into the parent's code, and uses no
  // OpenMP: the parent's OpenMP threads do not exist here, and libgomp cannot
  // start a team safely after fork().
  [[noreturn]] void child_main(int worker, int fd) {
    int code = 0;
    try {
      if (options_.worker_init) {
        try {
          try {
            options_.worker_init(worker);
          } catch (...) {
            rethrow_in_context(fmt::format("data loader worker {}: worker_init", worker));
          }
        } catch (const Error& e) {
          const Result r = failure(-1, -1, e);
          send_all(fd, &r, sizeof r);
          _exit(1);
        }
      }
      Command c;
      while (recv_all(fd, &c, sizeof c)) {
        const Result r = make_in_slot(c, worker);
        if (!send_all(fd, &r, sizeof r)) break;  // the parent has gone or stopped the loader
      }
    } catch (...) {
      code = 2;
    }
    _exit(code);
  }

  Result make_in_slot(const Command& c, int worker) {
    try {
      ANVIL_INTERNAL_CHECK(c.slot >= 0 && c.slot < slots_.count() && c.rows >= 0 && c.rows <= options_.batch_size);
      std::vector<Tensor> fields;
      for (size_t f = 0; f < layout_.dtypes.size(); ++f) {
        char* p = slots_.field(c.slot, f);
        // Zeroed like a new tensor, so a dataset that skips elements gives the same bytes as thread workers.
        std::memset(p, 0, static_cast<size_t>(c.rows * layout_.row_bytes[f]));
        Shape shape = layout_.samples[f];
        shape.insert(shape.begin(), c.rows);
        fields.push_back(Tensor::view(layout_.dtypes[f], std::move(shape), p));
      }
      fill_batch(*dataset_, slots_.indices(c.slot), c.rows, fields, c.batch, worker);
      Result r{};
      r.batch = c.batch;
      r.slot = c.slot;
      r.ok = 1;
      return r;
    } catch (const Error& e) {
      return failure(c.batch, c.slot, e);
    } catch (...) {
      return failure(c.batch, c.slot, Error(ErrorKind::kOutOfMemory, "data loader worker: out of memory"));
    }
  }

  // Sends batches to their workers while slots are free.
  void dispatch() {
    while (dispatched_ < batches_ && !free_slots_.empty()) {
      const int64_t slot = free_slots_.back(), b = dispatched_++;
      free_slots_.pop_back();
      const int64_t rows = batch_rows(static_cast<int64_t>(order_.size()), options_.batch_size, b);
      std::copy_n(order_.data() + b * options_.batch_size, rows, slots_.indices(slot));
      const Command c{b, rows, slot};
      // A failed send means the worker is dead; receive() reports it.
      send_all(workers_[static_cast<size_t>(b % workers())].fd, &c, sizeof c);
      pending_.emplace_back(b, slot);
    }
  }

  // The answer for batch `b` from its worker; throws when the worker died.
  Result receive(int64_t b) {
    const int id = static_cast<int>(b % workers());
    Worker& w = workers_[static_cast<size_t>(id)];
    const pid_t pid = w.pid;
    bool exited = false;
    int status = 0;
    for (;;) {
      pollfd p{w.fd, POLLIN, 0};
      const int rc = poll(&p, 1, exited ? 0 : kPollMs);
      if (rc < 0 && errno == EINTR) continue;
      Result r;
      if (rc > 0 && recv_all(w.fd, &r, sizeof r)) return r;
      // Nothing more to read from an exited worker, or end of file: it died.
      if (exited || rc != 0) break;
      exited = waitpid(w.pid, &status, WNOHANG) == w.pid;  // and look once more for an answer sent before exiting
      if (exited) w.pid = -1;
    }
    if (!exited) exited = reap(w, &status, std::chrono::steady_clock::now() + kExitGrace);
    broken(ErrorKind::kInternal,
           fmt::format("data loader worker {} (process {}) {} while making batch {}; start_epoch() starts new workers",
                       id, pid, exited ? describe_exit(status) : "closed its channel", b));
  }

  // Waits until `deadline` for the worker to exit; true (with its status) when it did.
  static bool reap(Worker& w, int* status, std::chrono::steady_clock::time_point deadline) {
    while (w.pid > 0) {
      const pid_t r = waitpid(w.pid, status, WNOHANG);
      if (r == w.pid || (r < 0 && errno != EINTR)) {
        w.pid = -1;  // exited, or already reaped by someone else (SIGCHLD ignored)
        return r > 0;
      }
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }

  // An answer for another batch is a worker_init failure (batch -1) or a bug.
  void check_answer(const Result& r, int64_t b, int64_t slot) {
    if (r.batch == b && r.slot == slot) return;
    if (r.batch == -1 && !r.ok) broken(error_kind(r.kind), r.message);
    broken(ErrorKind::kInternal,
           fmt::format("data loader worker {} answered batch {} instead of {}", b % workers(), r.batch, b));
  }

  [[noreturn]] void broken(ErrorKind kind, std::string why) {
    stop_workers();
    broken_ = std::move(why);
    throw Error(kind, broken_);
  }

  // Closing a worker's channel makes it exit after its current batch; one
  // still running after the grace period is killed. All are reaped.
  void stop_workers() {
    for (Worker& w : workers_)
      if (w.fd >= 0) close(w.fd);
    const auto deadline = std::chrono::steady_clock::now() + kExitGrace;  // one grace period for all
    for (Worker& w : workers_) {
      int status;
      if (w.pid > 0 && !reap(w, &status, deadline) && w.pid > 0) {
        kill(w.pid, SIGKILL);
        while (waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
        }
      }
    }
    workers_.clear();
    pending_.clear();
  }

  Batch copy_out(int64_t b, int64_t slot) {
    Batch batch;
    batch.index = b;
    batch.rows = batch_rows(static_cast<int64_t>(order_.size()), options_.batch_size, b);
    for (size_t f = 0; f < layout_.dtypes.size(); ++f) {
      Shape shape = layout_.samples[f];
      shape.insert(shape.begin(), batch.rows);
      Tensor t(layout_.dtypes[f], std::move(shape));
      std::memcpy(t.raw(), slots_.field(slot, f), t.nbytes());
      batch.fields.push_back(std::move(t));
    }
    return batch;
  }
};

}  // namespace

std::unique_ptr<BatchSource> make_process_source(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options) {
  return std::make_unique<ProcessSource>(std::move(dataset), options);
}

}  // namespace anvil::train
