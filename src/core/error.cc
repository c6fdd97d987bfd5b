#include "anvil/error.h"

namespace anvil {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidModel: return "invalid model";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kInvalidArgument: return "invalid argument";
    case ErrorKind::kOutOfMemory: return "out of memory";
    case ErrorKind::kInternal: return "internal error";
  }
  return "error";
}

}  // namespace anvil
