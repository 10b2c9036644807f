// Which rank of a job this process is, as its launcher tells it through the
// environment: torchrun (RANK, LOCAL_RANK, LOCAL_WORLD_SIZE), SLURM
// (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS_PER_NODE) and Open MPI
// (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_LOCAL_RANK,
// OMPI_COMM_WORLD_LOCAL_SIZE), first found first. A JAX process started by
// SLURM or Open MPI takes its process index from those same variables;
// JAX sets none of its own. Part of the value parser (tierrt_config), so
// output names expand the same way wherever they are built.
#pragma once

#include <string>

#include "runtime/config.h"

namespace tierrt::config {

struct RankInfo {
  int rank = -1;        // -1: not known
  int local_rank = -1;  // -1: not known
  int local_ranks = 0;  // processes of the job on this node; 0: not known
  // One line naming every variable that was set but not a whole number
  // from 0 to 2^31-1 (such a variable is ignored); empty when none was.
  std::string warning;
};

// Reads the variables above through getenv_fn (std::getenv when null).
RankInfo read_rank(GetenvFn getenv_fn = nullptr);

// This machine's name ("unknown" when the system does not tell), cut at the
// first '.' and with '/' replaced, so that it is one path component.
std::string short_hostname();

}  // namespace tierrt::config
