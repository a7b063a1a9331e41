// parse_tf_config: TF_CONFIG's JSON (nlohmann-json) into a TfConfig, with TensorFlow's
// validation rules and messages modelled on its own (multi_worker_util.py), so a user who
// knows TensorFlow's errors recognises kolo's.
#include "startup/tf_config.h"

#include <nlohmann/json.hpp>

#include "startup/launch_env.h"

namespace kolo::core {
namespace {

using nlohmann::json;

constexpr const char* kValidTypes = "\"chief\", \"worker\", \"evaluator\" and \"ps\"";

Status bad(const std::string& what) { return InvalidArgument("TF_CONFIG: " + what); }

// A JSON value as a message shows it, cut short.
std::string shown(const json& v) {
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::vector<std::string>* job_of(TfCluster* c, const std::string& type) {
  return const_cast<std::vector<std::string>*>(static_cast<const TfCluster*>(c)->job(type));
}

Status parse_cluster(const json& cluster, TfCluster* out) {
  if (!cluster.is_object()) {
    return bad("\"cluster\" must be an object of jobs ({\"worker\": [\"host:port\", ...]}), not " +
               shown(cluster));
  }
  for (const auto& [name, tasks] : cluster.items()) {
    std::vector<std::string>* job = job_of(out, name);
    if (!job) {
      return bad("the cluster's job '" + name + "' is not recognized: valid jobs are " +
                 kValidTypes);
    }
    if (!tasks.is_array()) {
      return bad("cluster job '" + name + "' must be a list of \"host:port\" strings, not " +
                 shown(tasks) + " (kolo does not take the sparse {index: address} form)");
    }
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const std::string task = name + " " + std::to_string(i);
      if (!tasks[i].is_string()) {
        return bad("cluster " + task + " must be a \"host:port\" string, not " + shown(tasks[i]));
      }
      const std::string address = tasks[i].get<std::string>();
      std::string host;
      int port;
      if (!parse_host_port(address, &host, &port)) {
        return bad("cluster " + task + " is '" + address +
                   "', not host:port (a host name or address, a colon and a port from 1 to "
                   "65535; an IPv6 address in brackets)");
      }
      job->push_back(address);
    }
  }
  return Status::OK();
}

// The task's index: a non-negative integer, or its decimal text (TensorFlow takes
// int(task['index'])).
bool task_index(const json& v, int* out) {
  if (v.is_number_integer()) {
    const auto i = v.get<long long>();
    if (i < 0 || i > 1 << 30) return false;
    *out = static_cast<int>(i);
    return true;
  }
  if (!v.is_string()) return false;
  const std::string s = v.get<std::string>();
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *out = std::stoi(s);
  return true;
}

Status parse_task(const json& task, bool cluster_given, TfConfig* out) {
  const std::string need =
      "each process needs \"task\": {\"type\": \"worker\", \"index\": N} saying which task of "
      "the cluster it is";
  if (!task.is_object()) {
    return bad("\"task\" must be an object {\"type\": ..., \"index\": ...}, not " + shown(task));
  }
  if (!task.contains("type") || !task.contains("index")) {
    if (!cluster_given) return Status::OK();  // no cluster: the task runs alone anyway
    return bad(std::string("the task has no \"") + (task.contains("type") ? "index" : "type") +
               "\": " + need);
  }
  if (!task["type"].is_string()) {
    return bad("the task's \"type\" must be a string, not " + shown(task["type"]));
  }
  out->task_type = task["type"].get<std::string>();
  if (!task_index(task["index"], &out->task_index)) {
    return bad("the task's \"index\" is " + shown(task["index"]) + ", not a non-negative integer");
  }
  return Status::OK();
}

// TensorFlow's _validate_cluster_spec, in its order.
Status validate(const TfConfig& c) {
  const std::vector<std::string>* tasks = c.cluster.job(c.task_type);
  if (!tasks) {
    return bad("Unrecognized task type '" + c.task_type + "': valid task types are " + kValidTypes);
  }
  if (tasks->empty() && c.task_type != "evaluator") {
    std::vector<std::string> jobs;
    for (const char* j : {"chief", "worker", "ps", "evaluator"}) {
      if (!c.cluster.job(j)->empty()) jobs.push_back(j);
    }
    return bad("task type '" + c.task_type +
               "' not found in the cluster (its jobs: " + joined(jobs) + ")");
  }
  if (c.cluster.chief.size() > 1) {
    return bad("There must be at most one 'chief' task; the cluster lists " +
               std::to_string(c.cluster.chief.size()) + " (" + joined(c.cluster.chief) + ")");
  }
  if (c.cluster.evaluator.size() > 1) {
    return bad("There must be at most one 'evaluator' task; the cluster lists " +
               std::to_string(c.cluster.evaluator.size()) + " (" + joined(c.cluster.evaluator) +
               ")");
  }
  // An evaluator outside the cluster (TensorFlow allows it) has no index to check.
  if (!tasks->empty() && c.task_index >= static_cast<int>(tasks->size())) {
    return bad("task index " + std::to_string(c.task_index) + " exceeds the maximum index " +
               std::to_string(tasks->size() - 1) + " of job '" + c.task_type + "' (" +
               std::to_string(tasks->size()) + (tasks->size() == 1 ? " task" : " tasks") + ": " +
               joined(*tasks) + ")");
  }
  return Status::OK();
}

}  // namespace

const std::vector<std::string>* TfCluster::job(const std::string& type) const {
  if (type == "chief") return &chief;
  if (type == "worker") return &worker;
  if (type == "ps") return &ps;
  if (type == "evaluator") return &evaluator;
  return nullptr;
}

Status parse_tf_config(const std::string& text, TfConfig* out) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    // what() starts "[json.exception.parse_error.101] "; the rest says where and why.
    std::string why = e.what();
    const auto bracket = why.find("] ");
    if (why.rfind("[json.", 0) == 0 && bracket != std::string::npos) why = why.substr(bracket + 2);
    return bad("not valid JSON: " + why);
  }
  if (!doc.is_object()) {
    return bad("must be a JSON object {\"cluster\": ..., \"task\": ...}, not " + shown(doc));
  }
  TfConfig c;
  if (doc.contains("cluster")) KOLO_RETURN_IF_ERROR(parse_cluster(doc["cluster"], &c.cluster));
  const bool cluster_given = !c.cluster.empty();
  if (doc.contains("task")) {
    KOLO_RETURN_IF_ERROR(parse_task(doc["task"], cluster_given, &c));
  } else if (cluster_given) {
    return bad(
        "there is a cluster but no task: each process needs \"task\": {\"type\": \"worker\", "
        "\"index\": N} saying which task of the cluster it is");
  }
  if (cluster_given) {
    KOLO_RETURN_IF_ERROR(validate(c));
  } else if (!c.task_type.empty() && !c.cluster.job(c.task_type)) {
    return bad("Unrecognized task type '" + c.task_type + "': valid task types are " + kValidTypes);
  }
  *out = c;
  return Status::OK();
}

Status parse_tf_config_from_env(const Env& env, TfConfig* out, bool* present) {
  const auto it = env.find("TF_CONFIG");
  *present = it != env.end() && !it->second.empty();
  if (!*present) {
    *out = TfConfig{};
    return Status::OK();
  }
  return parse_tf_config(it->second, out);
}

Status parse_tf_config_from_env(TfConfig* out, bool* present) {
  return parse_tf_config_from_env(process_env(), out, present);
}

Status validate_ps_cluster(const TfCluster& cluster) {
  std::vector<std::string> jobs;
  for (const char* j : {"chief", "worker", "ps", "evaluator"}) {
    const auto& tasks = *cluster.job(j);
    if (!tasks.empty()) jobs.push_back(std::string(j) + " x" + std::to_string(tasks.size()));
  }
  const std::string has =
      " (the cluster has " + (jobs.empty() ? std::string("no tasks") : joined(jobs)) +
      "): parameter-server training needs at least one \"worker\" and one \"ps\" task";
  if (cluster.worker.empty()) return InvalidArgument(kNoWorkerMessage + has);
  if (cluster.ps.empty()) return InvalidArgument(kNoPsMessage + has);
  return Status::OK();
}

std::string tf_task_name(const std::string& type, int index) {
  return "/job:" + type + "/replica:0/task:" + std::to_string(index);
}

}  // namespace kolo::core
