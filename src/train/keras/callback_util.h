// What the built-in callbacks (callbacks.cc, checkpoint_callbacks.cc) share: the "auto"
// mode rule, Python's text for numbers and str.format templates (Keras's messages, file
// names and CSV cells are Python's, so ours are too), and chief-only output.
//
// Not for: users (internal to kolo_train); the callbacks themselves.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kolo/train/callback.h"
#include "kolo/train/logs.h"

namespace kolo::train::internal {

// True when larger values of `monitor` are better. mode "max"/"min" say so; "auto" means
// max for names that contain "acc" or "auc" or start with "fmeasure", min otherwise.
// Another mode throws kolo::Error (kInvalidArgument) naming `who`.
bool monitor_greater(const char* who, const std::string& mode, const std::string& monitor);

// Python's str(float): the shortest text that reads back as `value` ("0.1", "1.0",
// "1e-05", "inf", "nan").
std::string py_float(double value);

// A value for format_template: an int (epoch, batch) or a float (a log entry).
struct TemplateField {
  std::string name;
  double value = 0;
  bool is_int = false;
};

// Python's str.format(**fields) for named fields: "{epoch:02d}", "{val_loss:.2f}",
// "{loss}", "{{" and "}}". A spec is Python's [[fill]align][sign][#][0][width][.precision]
// [type] with type one of d f F e E g G % (or none). Throws kolo::Error (kInvalidArgument)
// naming `who`, the template and the field for an unknown name (listing the known ones),
// a bad spec, or "d" applied to a float.
std::string format_template(const char* who, const std::string& tmpl,
                            const std::vector<TemplateField>& fields);

// printf into a std::string.
std::string strprintf(const char* format, ...) __attribute__((format(printf, 1, 2)));

// Keras's io_utils.print_msg: `text` and a newline to stdout, flushed; only on the chief.
void chief_print(const TrainingHost& host, const std::string& text);

// The log names joined by ",", as Keras lists "Available metrics".
std::string log_names(const Logs& logs);

}  // namespace kolo::train::internal
