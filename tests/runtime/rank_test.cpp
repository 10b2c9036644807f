// The rank a launcher announces (torchrun, SLURM, Open MPI) and the
// placeholders of output file names built from it.
#include "runtime/rank.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <map>
#include <string>

#include "runtime/config.h"

namespace tierrt::config {
namespace {

std::map<std::string, std::string> g_env;
const char* fake_getenv(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

TEST(Rank, NoneWithoutALauncher) {
  g_env = {};
  const RankInfo r = read_rank(&fake_getenv);
  EXPECT_EQ(r.rank, -1);
  EXPECT_EQ(r.local_rank, -1);
  EXPECT_EQ(r.local_ranks, 0);
  EXPECT_TRUE(r.warning.empty());
}

TEST(Rank, EachLauncher) {
  g_env = {{"RANK", "11"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "8"}};
  RankInfo r = read_rank(&fake_getenv);
  EXPECT_EQ(r.rank, 11);
  EXPECT_EQ(r.local_rank, 3);
  EXPECT_EQ(r.local_ranks, 8);
  g_env = {{"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "4"}};
  r = read_rank(&fake_getenv);
  EXPECT_EQ(r.rank, 5);
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.local_ranks, 4);
  g_env = {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  r = read_rank(&fake_getenv);
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.local_rank, 0);
  EXPECT_EQ(r.local_ranks, 2);
  EXPECT_TRUE(r.warning.empty());
}

TEST(Rank, TorchrunBeforeSlurmBeforeOpenMpi) {
  // torchrun under SLURM: SLURM_PROCID numbers the agents, RANK the ranks.
  g_env = {{"RANK", "9"}, {"SLURM_PROCID", "1"}, {"OMPI_COMM_WORLD_RANK", "4"},
           {"SLURM_LOCALID", "0"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}};
  const RankInfo r = read_rank(&fake_getenv);
  EXPECT_EQ(r.rank, 9);
  EXPECT_EQ(r.local_rank, 0);
}

TEST(Rank, MalformedValuesAreIgnoredWithOneLine) {
  g_env = {{"RANK", "3x"}, {"SLURM_PROCID", "6"}, {"LOCAL_RANK", "-1"}, {"SLURM_LOCALID", "99999999999"},
           {"OMPI_COMM_WORLD_LOCAL_RANK", "../\n"}};
  const RankInfo r = read_rank(&fake_getenv);
  EXPECT_EQ(r.rank, 6);  // the next launcher's variable
  EXPECT_EQ(r.local_rank, -1);
  for (const char* named : {"RANK=\"3x\"", "LOCAL_RANK=\"-1\"", "SLURM_LOCALID=\"99999999999\"",
                            "OMPI_COMM_WORLD_LOCAL_RANK=\"../\\x0a\""})
    EXPECT_NE(r.warning.find(named), std::string::npos) << r.warning;
  EXPECT_EQ(r.warning.find("SLURM_PROCID"), std::string::npos) << r.warning;
  EXPECT_EQ(r.warning.find('\n'), std::string::npos) << r.warning;
  EXPECT_EQ(r.warning.rfind("RANK=", 0), 0u) << r.warning;  // no "tierrt: " inside the line
}

TEST(OutputPath, LocalRankAndHost) {
  const std::string pid = std::to_string(getpid());
  const std::string host = short_hostname();
  ASSERT_FALSE(host.empty());
  EXPECT_EQ(host.find('/'), std::string::npos);
  EXPECT_EQ(host.find('.'), std::string::npos);
  g_env = {};
  EXPECT_EQ("s.0.0." + host + "." + pid, expand_output_path("s.%r.%l.%h.%p", &fake_getenv));
  g_env = {{"RANK", "12"}, {"LOCAL_RANK", "4"}};
  EXPECT_EQ("/tmp/" + host + "/r12-l4-" + pid + ".json", expand_output_path("/tmp/%h/r%r-l%l-%p.json", &fake_getenv));
  g_env = {{"SLURM_PROCID", "7"}, {"SLURM_LOCALID", "3"}};
  EXPECT_EQ("7_3_%l", expand_output_path("%r_%l_%%l", &fake_getenv));
  // A malformed rank is no path: it expands as an unknown one.
  g_env = {{"RANK", "../../etc"}, {"LOCAL_RANK", "x"}};
  EXPECT_EQ("out.0.0", expand_output_path("out.%r.%l", &fake_getenv));
  EXPECT_EQ("%q%", expand_output_path("%q%", &fake_getenv));
}

}  // namespace
}  // namespace tierrt::config
