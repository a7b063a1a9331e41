// open_job_store and join_job (startup/job_store.h) across real processes: each task is a
// forked child that detects its launch environment from an Env map (TF_CONFIG or
// torch-style variables, as independent processes would see them), opens the job's store
// on 127.0.0.1 and joins the job; the parent checks each task's result and how long it
// took. A missing task, a wrong secret, a rank started twice and disagreeing sizes end in
// errors naming them, within KOLO_START_TIMEOUT_SECONDS. The races at the bound (the host
// giving up while another task times out or arrives) are tested in one process, over a
// memory store that plays the host's give-up after each store operation of a join in turn.
#include "startup/job_store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "rendezvous/memory_store.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/tcp_store.h"

namespace kolo::core {
namespace {

// A port nobody listens on now (the system's pick for a socket closed at once).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// What a task ended with.
struct Outcome {
  bool ok = false;
  std::string message;  // the error, or "rank R of N" on success
  ErrorCode code = ErrorCode::kOk;
  double seconds = 0;  // from start to end of the task
};

// The task's whole life in the child: detect, open, join; then (so the hosting task's
// server outlives everyone's join, as the runtime's does) every task sets "test/done/<r>"
// and the hosting task waits for all of them.
Status run_task(const Env& env, std::string* summary) {
  Config config;
  KOLO_RETURN_IF_ERROR(parse_config(env, &config));
  LaunchEnv launch;
  KOLO_RETURN_IF_ERROR(detect_launch_env(env, &launch));
  JobStore job;
  KOLO_RETURN_IF_ERROR(open_job_store(launch, config, &job));
  // Under a prefix, as kolo::init() joins (its keys of one start-up under "init/<n>").
  const std::shared_ptr<rendezvous::Store> root = job.store;
  job.store = std::make_shared<rendezvous::PrefixStore>(root, "init/0");
  KOLO_RETURN_IF_ERROR(join_job(job, launch, config.start_timeout_seconds));
  KOLO_RETURN_IF_ERROR(job.store->set("test/done/" + std::to_string(launch.rank), "1"));
  if (job.server) {
    std::vector<std::string> done;
    for (int r = 0; r < launch.size; ++r) done.push_back("test/done/" + std::to_string(r));
    KOLO_RETURN_IF_ERROR(job.store->wait(done, deadline_after(10)));
  }
  *summary = "rank " + std::to_string(launch.rank) + " of " + std::to_string(launch.size);
  return Status::OK();
}

class Task {
 public:
  // Forks a child that runs the task with `env` and reports through a pipe.
  explicit Task(const Env& env) : started_(Clock::now()) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      std::string summary;
      const Status s = run_task(env, &summary);
      const std::string report =
          std::string(1, static_cast<char>(s.code())) + (s.ok() ? summary : s.message());
      for (std::size_t at = 0; at < report.size();) {
        const ssize_t n = ::write(fds[1], report.data() + at, report.size() - at);
        if (n <= 0) break;
        at += static_cast<std::size_t>(n);
      }
      ::_exit(0);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  pid_t pid() const { return pid_; }
  ~Task() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }

  // Reads the child's report (at most 20 s: every wait in a task is bounded well below).
  Outcome finish() {
    Outcome o;
    std::string report;
    const Deadline by = deadline_after(20);
    char buf[4096];
    while (Clock::now() < by) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::read(fd_, buf, sizeof(buf));
      if (n <= 0) break;
      report.append(buf, static_cast<std::size_t>(n));
    }
    o.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    EXPECT_FALSE(report.empty()) << "the task reported nothing (status " << status << ")";
    if (report.empty()) return o;
    o.code = static_cast<ErrorCode>(report[0]);
    o.ok = o.code == ErrorCode::kOk;
    o.message = report.substr(1);
    return o;
  }

 private:
  Clock::time_point started_;
  pid_t pid_ = -1;
  int fd_ = -1;
};

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

Env torch_env(int port, int rank, int size, const std::string& secret) {
  return {{"MASTER_ADDR", "127.0.0.1"},       {"MASTER_PORT", std::to_string(port)},
          {"RANK", std::to_string(rank)},     {"WORLD_SIZE", std::to_string(size)},
          {"KOLO_RENDEZVOUS_SECRET", secret}, {"KOLO_START_TIMEOUT_SECONDS", "2"},
          {"KOLO_LOG_LEVEL", "off"}};
}

Env tf_env(const std::string& cluster, const std::string& type, int index) {
  return {{"TF_CONFIG", "{\"cluster\": " + cluster + ", \"task\": {\"type\": \"" + type +
                            "\", \"index\": " + std::to_string(index) + "}}"},
          {"KOLO_START_TIMEOUT_SECONDS", "2"},
          {"KOLO_LOG_LEVEL", "off"}};
}

// Three torch-style ranks; rank 0 (the store's host) starts last, so the others'
// connects retry until it listens.
TEST(JobStoreTest, TorchStyleRanksMeet) {
  const int port = free_port();
  Task r2(torch_env(port, 2, 3, "job-secret"));
  Task r1(torch_env(port, 1, 3, "job-secret"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Task r0(torch_env(port, 0, 3, "job-secret"));
  const Outcome o0 = r0.finish(), o1 = r1.finish(), o2 = r2.finish();
  EXPECT_TRUE(o0.ok) << o0.message;
  EXPECT_TRUE(o1.ok) << o1.message;
  EXPECT_TRUE(o2.ok) << o2.message;
  EXPECT_EQ(o0.message, "rank 0 of 3");
  EXPECT_EQ(o1.message, "rank 1 of 3");
  EXPECT_EQ(o2.message, "rank 2 of 3");
}

// A chief and two workers from one TF_CONFIG cluster (without a secret: one host); the
// chief hosts the store at its own address.
TEST(JobStoreTest, TfConfigChiefAndWorkersMeet) {
  const int port = free_port();
  const std::string cluster = "{\"chief\": [\"127.0.0.1:" + std::to_string(port) +
                              "\"], \"worker\": [\"127.0.0.1:1\", \"127.0.0.1:2\"]}";
  Task w1(tf_env(cluster, "worker", 1));
  Task c(tf_env(cluster, "chief", 0));
  Task w0(tf_env(cluster, "worker", 0));
  const Outcome oc = c.finish(), o0 = w0.finish(), o1 = w1.finish();
  EXPECT_EQ(oc.message, "rank 0 of 3");
  EXPECT_EQ(o0.message, "rank 1 of 3");
  EXPECT_EQ(o1.message, "rank 2 of 3");
}

// Two TF_CONFIG jobs without a secret given one store port: a task of the second job
// that reaches the first job's store is refused, naming both clusters, and takes no place
// in the first job, which then meets with its own worker (it merged silently before, and
// both exited 0).
TEST(JobStoreTest, ATaskOfAnotherJobOnTheSameStoreIsRefused) {
  const int port = free_port();
  const std::string chief = "\"chief\": [\"127.0.0.1:" + std::to_string(port) + "\"]";
  const std::string mine = "{" + chief + ", \"worker\": [\"127.0.0.1:1\"]}";
  const std::string other = "{" + chief + ", \"worker\": [\"127.0.0.1:2\"]}";
  // The foreign worker starts first: it connects as soon as the chief listens.
  Task foreign(tf_env(other, "worker", 0));
  Task c(tf_env(mine, "chief", 0));
  const Outcome of = foreign.finish();
  EXPECT_EQ(of.code, ErrorCode::kInvalidArgument) << of.message;
  EXPECT_CONTAINS(of.message,
                  "worker 0 (127.0.0.1:2) reached the store at 127.0.0.1:" + std::to_string(port));
  EXPECT_CONTAINS(of.message, "serves another job, started with TF_CONFIG cluster " + mine);
  EXPECT_CONTAINS(of.message, "this task was started with TF_CONFIG cluster " + other);
  EXPECT_CONTAINS(of.message, "give each job its own port");
  Task w(tf_env(mine, "worker", 0));
  const Outcome oc = c.finish(), ow = w.finish();
  EXPECT_EQ(oc.message, "rank 0 of 2");
  EXPECT_EQ(ow.message, "rank 1 of 2");
}

// TensorFlow would wait forever; kolo ends start-up at KOLO_START_TIMEOUT_SECONDS (2 s
// here) on every task that came, naming the one that did not by its TF_CONFIG name.
TEST(JobStoreTest, MissingWorkerEndsStartUpInTheBoundNamingIt) {
  const int port = free_port();
  const std::string missing = "localhost:" + std::to_string(free_port());
  const std::string cluster = "{\"worker\": [\"localhost:" + std::to_string(port) +
                              "\", \"localhost:1\", \"" + missing + "\"]}";
  Task w0(tf_env(cluster, "worker", 0));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Task w1(tf_env(cluster, "worker", 1));
  // Worker 1, started later, learns it from worker 0 when worker 0 gives up: worker 0
  // hosts the store, which ends with it.
  const Outcome o0 = w0.finish(), o1 = w1.finish();
  EXPECT_CONTAINS(o1.message, "(reported by worker 0 (localhost:" + std::to_string(port) + "))");
  EXPECT_LT(o1.seconds, 1.9);
  EXPECT_GE(o0.seconds, 1.9);
  EXPECT_LT(o0.seconds, 5.0);
  for (const Outcome& o : {o0, o1}) {
    EXPECT_EQ(o.code, ErrorCode::kPeerFailure) << o.message;
    EXPECT_CONTAINS(o.message,
                    "start-up timed out after 2 s (KOLO_START_TIMEOUT_SECONDS): worker 2 (" +
                        missing + ") never arrived");
    EXPECT_CONTAINS(o.message, "same TF_CONFIG cluster");
  }
}

// The store's host never starts: the others' connects give up at the same bound.
TEST(JobStoreTest, MissingChiefEndsStartUpInTheBound) {
  const std::string chief = "127.0.0.1:" + std::to_string(free_port());
  const std::string cluster = "{\"chief\": [\"" + chief + "\"], \"worker\": [\"127.0.0.1:1\"]}";
  Task w0(tf_env(cluster, "worker", 0));
  const Outcome o = w0.finish();
  EXPECT_EQ(o.code, ErrorCode::kPeerFailure) << o.message;
  EXPECT_CONTAINS(o.message, "worker 0 (127.0.0.1:1) cannot use the job's store at " + chief +
                                 " (hosted by chief 0 (" + chief + "), from TF_CONFIG");
  EXPECT_CONTAINS(o.message, "KOLO_START_TIMEOUT_SECONDS=2");
  EXPECT_GE(o.seconds, 1.9);
  EXPECT_LT(o.seconds, 5.0);
}

// A task with another secret is refused at once; the host then times out naming it.
TEST(JobStoreTest, WrongSecretIsRefused) {
  const int port = free_port();
  Task r0(torch_env(port, 0, 2, "right"));
  Task r1(torch_env(port, 1, 2, "wrong"));
  const Outcome o1 = r1.finish();
  EXPECT_EQ(o1.code, ErrorCode::kInvalidArgument) << o1.message;
  EXPECT_CONTAINS(o1.message,
                  "rank 1 cannot use the job's store at 127.0.0.1:" + std::to_string(port));
  EXPECT_CONTAINS(o1.message, "wrong job secret");
  EXPECT_LT(o1.seconds, 1.5);
  const Outcome o0 = r0.finish();
  EXPECT_EQ(o0.code, ErrorCode::kPeerFailure) << o0.message;
  EXPECT_CONTAINS(o0.message, "rank 1 never arrived");
  EXPECT_CONTAINS(o0.message, "WORLD_SIZE=2");
}

// Two processes started as rank 1, and one started for another job size: each is told,
// and names the other's claim.
TEST(JobStoreTest, RankStartedTwiceAndSizeMismatchAreErrors) {
  const int port = free_port();
  Task r0(torch_env(port, 0, 3, "s"));
  Task a(torch_env(port, 1, 3, "s"));
  {
    // The first rank 1 claims before the second starts (and so has set the job's size);
    // watched through the store itself (under run_task's "init/0"), not guessed with a sleep.
    rendezvous::TcpStoreOptions watch;
    watch.port = port;
    watch.secret = "s";
    watch.connect_timeout_s = 10;
    std::unique_ptr<rendezvous::TcpStore> store;
    ASSERT_TRUE(rendezvous::TcpStore::connect(watch, &store).ok());
    std::string claim;
    ASSERT_TRUE(store->get("init/0/start/arrived/1", deadline_after(10), &claim).ok());
    EXPECT_CONTAINS(claim, " pid " + std::to_string(a.pid()));
  }
  Task b(torch_env(port, 1, 3, "s"));
  Task big(torch_env(port, 2, 4, "s"));
  const Outcome ob = b.finish();
  EXPECT_EQ(ob.code, ErrorCode::kInvalidArgument) << ob.message;
  EXPECT_CONTAINS(ob.message, "rank 1 was already claimed by another process (");
  EXPECT_CONTAINS(ob.message, "two processes were started as rank 1");
  const Outcome obig = big.finish();
  EXPECT_EQ(obig.code, ErrorCode::kInvalidArgument) << obig.message;
  EXPECT_CONTAINS(obig.message,
                  "rank 2 was started for a job of 4 tasks, but a task that arrived before it "
                  "was started for 3");
  // The first rank 1 and rank 0 wait for rank 2 until the bound.
  const Outcome o0 = r0.finish(), oa = a.finish();
  EXPECT_CONTAINS(o0.message, "rank 2 never arrived");
  EXPECT_CONTAINS(oa.message, "rank 2 never arrived");
}

// Rank 1 gives up first (its bound is 1 s, the host's 3 s): it decides for everyone, so
// the host, woken at once, reports rank 1's reason long before its own bound.
TEST(JobStoreTest, FirstTaskToGiveUpDecidesForAll) {
  const int port = free_port();
  Env host = torch_env(port, 0, 3, "s");
  host["KOLO_START_TIMEOUT_SECONDS"] = "3";
  Env first = torch_env(port, 1, 3, "s");
  first["KOLO_START_TIMEOUT_SECONDS"] = "1";
  Task r0(host);
  Task r1(first);
  const Outcome o1 = r1.finish(), o0 = r0.finish();
  EXPECT_EQ(o1.code, ErrorCode::kPeerFailure) << o1.message;
  EXPECT_CONTAINS(o1.message,
                  "start-up timed out after 1 s (KOLO_START_TIMEOUT_SECONDS): rank 2 "
                  "never arrived; check that every rank was started with WORLD_SIZE=3");
  EXPECT_EQ(o0.code, ErrorCode::kPeerFailure) << o0.message;
  EXPECT_EQ(o0.message, o1.message + " (reported by rank 1)");
  EXPECT_LT(o0.seconds, 2.5);
}

// A store that plays the hosting task (rank 0) giving up as join_job does: it decides the
// outcome ("start/outcome", unless a task decided first) and then fills the missing ranks'
// arrival keys with the wake-up value. It does so right after the joining task's
// `after_ops`-th store operation, so that a test can put the give-up at every point of a
// join: while the task checks, claims, waits, reads who arrived or decides.
class HostGivesUpStore : public rendezvous::Store {
 public:
  HostGivesUpStore(int after_ops, std::string why, std::vector<int> missing)
      : after_ops_(after_ops), why_(std::move(why)), missing_(std::move(missing)) {}

  rendezvous::MemoryStore& inner() { return inner_; }
  // The outcome in the store ("" while undecided).
  std::string outcome() {
    std::string value;
    bool found = false;
    EXPECT_TRUE(inner_.try_get("start/outcome", &value, &found).ok());
    return value;
  }

  Status set(const std::string& key, const std::string& value) override {
    return step(inner_.set(key, value));
  }
  Status get(const std::string& key, Deadline deadline, std::string* value) override {
    return step(inner_.get(key, deadline, value));
  }
  Status try_get(const std::string& key, std::string* value, bool* found) override {
    return step(inner_.try_get(key, value, found));
  }
  Status check(const std::vector<std::string>& keys, bool* all_exist) override {
    return step(inner_.check(keys, all_exist));
  }
  Status add(const std::string& key, std::int64_t delta, std::int64_t* new_value) override {
    return step(inner_.add(key, delta, new_value));
  }
  Status compare_set(const std::string& key, const std::string& expected,
                     const std::string& desired, std::string* actual) override {
    return step(inner_.compare_set(key, expected, desired, actual));
  }
  Status wait(const std::vector<std::string>& keys, Deadline deadline) override {
    return step(inner_.wait(keys, deadline));
  }
  Status erase(const std::string& key, bool* existed) override {
    return step(inner_.erase(key, existed));
  }
  std::string describe() const override { return "host-gives-up store"; }

 private:
  Status step(Status s) {
    if (++ops_ != after_ops_) return s;
    const std::string decision = "rank 0\n" + why_;
    std::string actual;
    EXPECT_TRUE(inner_.compare_set("start/outcome", "", decision, &actual).ok());
    if (actual != decision) return s;  // the task decided first
    for (int r : missing_) {
      EXPECT_TRUE(
          inner_.compare_set("start/arrived/" + std::to_string(r), "", "(start-up failed)", &actual)
              .ok());
    }
    return s;
  }

  rendezvous::MemoryStore inner_;
  const int after_ops_;
  const std::string why_;
  const std::vector<int> missing_;
  int ops_ = 0;  // the joining task's operations so far (one thread)
};

// The outcome of rank `rank` of 3 joining (not hosting) over `store`, which holds the
// arrivals of `present`, with a bound of 0.1 s.
Status join_over(HostGivesUpStore* store, int rank, const std::vector<int>& present) {
  const Env env = torch_env(free_port(), rank, 3, "s");
  LaunchEnv launch;
  EXPECT_TRUE(detect_launch_env(env, &launch).ok());
  EXPECT_TRUE(store->inner().set("start/size", "3").ok());
  for (int r : present) {
    EXPECT_TRUE(store->inner().set("start/arrived/" + std::to_string(r), "host pid 1").ok());
  }
  JobStore job;
  job.store = std::shared_ptr<rendezvous::Store>(store, [](rendezvous::Store*) {});
  return join_job(job, launch, 0.1);
}

constexpr const char* kHostsWhy =
    "start-up timed out after 0.1 s (KOLO_START_TIMEOUT_SECONDS): rank 2 never arrived; check";

// Rank 2 never comes; rank 1 times out about when the host gives up. The key the host
// fills to wake the others is no arrival: wherever the give-up falls in rank 1's join,
// rank 1 fails naming rank 2 (its own timeout when it decided first, else the host's
// reason) and tells the host it may stop serving; it never takes the wake-up for the last
// arrival. (Before the fix, a give-up between rank 1's timeout and its reading of the
// arrivals made rank 1 succeed alone.)
TEST(JobStoreTest, HostGivingUpNeverCountsAsTheLastArrival) {
  for (int after_ops = 1; after_ops <= 10; ++after_ops) {
    SCOPED_TRACE("the host gives up after rank 1's store operation " + std::to_string(after_ops));
    HostGivesUpStore store(after_ops, kHostsWhy, {2});
    const Status s = join_over(&store, 1, {0});
    EXPECT_EQ(s.code(), ErrorCode::kPeerFailure) << s.message();
    EXPECT_CONTAINS(s.message(), "rank 2 never arrived");
    const std::string outcome = store.outcome();
    if (outcome.rfind("rank 0\n", 0) == 0) {
      EXPECT_EQ(s.message(), std::string(kHostsWhy) + " (reported by rank 0)");
    } else {
      EXPECT_CONTAINS(outcome, "rank 1\nstart-up timed out after 0.1 s");
    }
    std::string ack;
    bool found = false;
    EXPECT_TRUE(store.inner().try_get("start/aborted/1", &ack, &found).ok());
    EXPECT_TRUE(found) << "rank 1 failed without telling the host it may stop serving";
  }
}

// Rank 2 comes just as the host gives up on it. Wherever the give-up falls, rank 2's
// result is the outcome decided in the store: the host's reason when the host decided
// first (also when it filled rank 2's key before rank 2 could claim it: that is not
// "claimed by another process"), success when rank 2 saw every rank arrive first (the
// host then finds the outcome decided and succeeds too).
TEST(JobStoreTest, LateRankAgreesWithTheDecidedOutcome) {
  bool saw_failure = false, saw_success = false;
  for (int after_ops = 1; after_ops <= 7; ++after_ops) {
    SCOPED_TRACE("the host gives up after rank 2's store operation " + std::to_string(after_ops));
    HostGivesUpStore store(after_ops, kHostsWhy, {2});
    const Status s = join_over(&store, 2, {0, 1});
    if (store.outcome() == "ok") {
      EXPECT_TRUE(s.ok()) << s.message();
      saw_success = true;
    } else {
      EXPECT_EQ(s.code(), ErrorCode::kPeerFailure) << s.message();
      EXPECT_EQ(s.message(), std::string(kHostsWhy) + " (reported by rank 0)");
      saw_failure = true;
    }
  }
  EXPECT_TRUE(saw_failure);
  EXPECT_TRUE(saw_success);
}

// The hosting rank's port is taken: an error at once, naming the port and where it came
// from.
TEST(JobStoreTest, PortInUseIsAnErrorAtOnce) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  const Env env = torch_env(port, 0, 2, "s");
  Config config;
  ASSERT_TRUE(parse_config(env, &config).ok());
  LaunchEnv launch;
  ASSERT_TRUE(detect_launch_env(env, &launch).ok());
  JobStore job;
  const Status s = open_job_store(launch, config, &job);
  ::close(fd);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.message();
  EXPECT_CONTAINS(s.message(), "rank 0 hosts the job's store on port " + std::to_string(port) +
                                   " (from MASTER_ADDR and MASTER_PORT) but cannot listen there");
  EXPECT_CONTAINS(s.message(), "Give the job a free port");
}

TEST(JobStoreTest, NotAStoreJob) {
  JobStore job;
  const Status s = open_job_store(LaunchEnv{}, Config{}, &job);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_CONTAINS(s.message(), "without a store address");
}

}  // namespace
}  // namespace kolo::core
