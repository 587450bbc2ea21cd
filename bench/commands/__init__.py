"""`nanochat-bench <group>`: one module per group of commands, each a thin layer over the library.

  analysis.py    `nanochat-bench collect|report|check`
  capacity.py    `nanochat-bench capacity`
  containers.py  `nanochat-bench edf`
  data.py        `nanochat-bench data download|generate|info|bin`
  launch.py      `nanochat-bench plan | submit | status | render | speedrun`
  reframe.py     `nanochat-bench reframe`
  tokenizer.py   `nanochat-bench tokenizer train|eval`
  workload.py    `nanochat-bench model | train | preflight | smoke`
"""
