// anvil::Error — the one exception type of the library.
//
// Every failure that a caller can cause (a bad model file, a wrong input, an
// op Anvil does not implement) is reported as an Error with a kind and a
// message that names the node, op and value involved. The CLI turns it into
// one line on stderr and a non-zero exit code (see exit_code()).
#pragma once

#include <stdexcept>
#include <string>

namespace anvil {

enum class ErrorKind {
  kInvalidModel,     // the model file is malformed or inconsistent
  kUnsupported,      // valid ONNX that Anvil does not implement
  kInvalidArgument,  // bad input from the caller: names, shapes, dtypes, files
  kOutOfMemory,
  kInternal,         // a bug in Anvil
};

const char* error_kind_name(ErrorKind kind);

// `s` with bytes below 0x20 and 0x7f written as \xNN.
std::string escape_control(const std::string& s);

class Error : public std::runtime_error {
 public:
  // Control characters in `message` (from names in a hostile file) are
  // escaped as \xNN, so the message is always one printable line.
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(escape_control(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  // Process exit code for this kind of failure (2..6).
  int exit_code() const { return 2 + static_cast<int>(kind_); }

 private:
  ErrorKind kind_;
};

}  // namespace anvil
