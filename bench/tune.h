// ringloader-bench --tune: short trials around the automatic thread choice.
#pragma once

#include "config.h"
#include "dataset.h"

namespace ringloader::bench {

// Runs the trials and prints the table, the choice and the line to paste.
int RunTune(const Dataset& ds, Config cfg);

}  // namespace ringloader::bench
