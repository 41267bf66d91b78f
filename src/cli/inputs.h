// Turning command-line input options into tensors for a graph.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "ir/graph.h"

namespace sampan::cli {

//! Parses "NAME=1x3x224x224" pairs into shapes.
Result<std::map<std::string, Shape>> ParseShapeArgs(const std::vector<std::string>& args);
//! Parses "NAME=path.npy" pairs.
Result<std::map<std::string, std::string>> ParseFileArgs(const std::vector<std::string>& args);

struct InputSpec {
  std::map<std::string, std::string> files;  //!< name -> .npy path
  std::map<std::string, Shape> shapes;       //!< name -> shape for random inputs
  bool random = false;
  uint64_t seed = 0;
};

//! One tensor per graph input, from files or random data; errors name the input
//! and say which flag would fix it.
Result<std::map<std::string, Tensor>> PrepareInputs(const ir::Graph& graph, const InputSpec& spec);

}  // namespace sampan::cli
