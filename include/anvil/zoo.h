// Built-in models with seeded random weights, so every command works with no file.
//
//   anvil::Session s = anvil::zoo_session("resnet18", opts);
#pragma once

#include <string>
#include <vector>

#include "anvil/session.h"

namespace anvil {

std::vector<std::string> zoo_names();
Session zoo_session(const std::string& name, const SessionOptions& options = {}, int batch = 1);

}  // namespace anvil
