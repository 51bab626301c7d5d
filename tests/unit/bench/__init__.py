"""Unit tests of the benchmarks' pure parts (bench/): what decides their figures,
on made-up inputs. They import bench, which is what they test."""
