// The Python-compatible text the callbacks print and name files with: str(float) and
// str.format templates ({epoch:02d}, {val_loss:.2f}, ...), and the "auto" mode rule.
// Expected strings are what CPython 3 prints for the same calls.
#include <gtest/gtest.h>

#include <cmath>

#include "kolo/error.h"
#include "train/keras/callback_util.h"

namespace kolo::train::internal {
namespace {

TEST(PyFloat, MatchesPythonRepr) {
  EXPECT_EQ(py_float(0.1), "0.1");
  EXPECT_EQ(py_float(1.0), "1.0");
  EXPECT_EQ(py_float(0.0), "0.0");
  EXPECT_EQ(py_float(-0.0), "-0.0");
  EXPECT_EQ(py_float(-2.5), "-2.5");
  EXPECT_EQ(py_float(100.0), "100.0");
  EXPECT_EQ(py_float(12345.678), "12345.678");
  EXPECT_EQ(py_float(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(py_float(0.0001), "0.0001");
  EXPECT_EQ(py_float(1e-05), "1e-05");
  EXPECT_EQ(py_float(1.5e-07), "1.5e-07");
  EXPECT_EQ(py_float(1e16), "1e+16");
  EXPECT_EQ(py_float(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(py_float(1e22), "1e+22");
  EXPECT_EQ(py_float(static_cast<double>(0.295f)), "0.29499998688697815");
  EXPECT_EQ(py_float(NAN), "nan");
  EXPECT_EQ(py_float(INFINITY), "inf");
  EXPECT_EQ(py_float(-INFINITY), "-inf");
}

std::vector<TemplateField> fields() {
  return {{"epoch", 3, true},
          {"loss", 0.123456, false},
          {"val_loss", 0.98765, false},
          {"acc", 0.5, false},
          {"neg", -1.25, false}};
}

TEST(FormatTemplate, KerasExamplesAndPythonSpecs) {
  {  // KerasExamples
    EXPECT_EQ(format_template("t", "weights.{epoch:02d}-{val_loss:.2f}.hdf5", fields()),
              "weights.03-0.99.hdf5");
    EXPECT_EQ(format_template("t", "ckpt-{epoch}", fields()), "ckpt-3");
    EXPECT_EQ(format_template("t", "{loss}", fields()), "0.123456");
    EXPECT_EQ(format_template("t", "no fields", fields()), "no fields");
  }
  {  // SpecsAsPython
    EXPECT_EQ(format_template("t", "{epoch:>4}|{epoch:<4}|{epoch:^5}|{epoch:*^5}", fields()),
              "   3|3   |  3  |**3**");
    EXPECT_EQ(format_template("t", "{acc:.1%}", fields()), "50.0%");
    EXPECT_EQ(format_template("t", "{loss:+.3e}", fields()), "+1.235e-01");
    EXPECT_EQ(format_template("t", "{loss:.3g}|{loss:.3}", fields()), "0.123|0.123");
    EXPECT_EQ(format_template("t", "{neg:08.3f}|{neg:+}|{acc: }", fields()), "-001.250|-1.25| 0.5");
    EXPECT_EQ(format_template("t", "{epoch:.2f}|{epoch:+d}", fields()), "3.00|+3");
    EXPECT_EQ(format_template("t", "{{epoch}}-{{{epoch}}}", fields()), "{epoch}-{3}");
  }
}

void expect_error(const std::string& tmpl, const std::string& part) {
  try {
    format_template("ModelCheckpoint", tmpl, fields());
    ADD_FAILURE() << tmpl << " formatted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    EXPECT_NE(what.find("ModelCheckpoint: cannot format the filepath \"" + tmpl + "\""),
              std::string::npos)
        << what;
    EXPECT_NE(what.find(part), std::string::npos) << what;
  }
}

TEST(FormatTemplate, ErrorsNameTheFieldAndWhatIsKnown) {
  expect_error("w-{val_los:.2f}",
               "no value named \"val_los\" (known now: epoch, loss, val_loss, acc, neg)");
  expect_error("w-{val_loss:02d}", "field \"val_loss\" is a float (0.98765); format code 'd'");
  expect_error("w-{loss:,.2f}", "the format spec \",.2f\" of field \"loss\" is not supported");
  expect_error("w-{epoch:.2}", "field \"epoch\" is an int: it takes no precision");
  expect_error("w-{epoch", "a '{' without its '}'");
  expect_error("w-}", "a single '}'");
}

TEST(MonitorGreater, AutoMaxForAccuracyAndAuc) {
  EXPECT_TRUE(monitor_greater("t", "auto", "val_accuracy"));
  EXPECT_TRUE(monitor_greater("t", "auto", "acc"));
  EXPECT_TRUE(monitor_greater("t", "auto", "val_auc"));
  EXPECT_TRUE(monitor_greater("t", "auto", "fmeasure_1"));
  EXPECT_FALSE(monitor_greater("t", "auto", "val_loss"));
  EXPECT_FALSE(monitor_greater("t", "auto", "mae"));
  EXPECT_TRUE(monitor_greater("t", "max", "val_loss"));
  EXPECT_FALSE(monitor_greater("t", "min", "val_accuracy"));
  try {
    monitor_greater("EarlyStopping", "maximum", "val_loss");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "EarlyStopping: mode \"maximum\" is not one of \"auto\", \"min\", \"max\"");
  }
}

}  // namespace
}  // namespace kolo::train::internal
