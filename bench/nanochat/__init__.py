"""The nanochat-faithful code itself: model, optimizers, data, tokenizer, chat data, the trainer.

  adamw.py         sharded AdamW (ZeRO-2), as upstream's nanochat/adamw.py
  attention.py     causal attention, optionally forced onto the flash-style kernels
  base_eval.py     the base_eval stage: the CORE metric of a base checkpoint (upstream's scripts/base_eval.py)
  base_eval_config.py base_eval's settings (no torch: the planner reads them)
  base_loss.py     the base_loss stage: train/val bpb of a base checkpoint and its samples (scripts/base_loss.py)
  base_loss_config.py base_loss's settings (no torch: the planner reads them)
  calculator.py    the calculator tool of chat generation, its expressions run in the sandbox
  chat_eval.py     chat evaluation (ARC, MMLU, GSM8K, HumanEval, SpellingBee) and ChatCORE
  chat_eval_config.py chat_eval's settings, upstream's short and dashed flags (no torch: the planner reads them)
  chat_format.py   a conversation as token ids plus the mask of what the assistant is trained on
  chat_sft.py      SFT (upstream's scripts/chat_sft.py): the mid checkpoint fine-tuned on the SFT mixture
  chatdata.py      the staged chat data (mid-training, SFT, chat evaluation) and how it is read
  chatgen.py       offline stand-ins for the staged chat data (data generate --chat)
  chatstage.py     data download --chat: stage every chat dataset for offline nodes
  checkpoint.py    checkpoints in upstream's layout
  common.py        the base directory, rank-0 printing, dist info
  compute.py       device and process-group set-up
  config.py        the trainer's settings: one dataclass, nanochat's flag names
  core_eval.py     CORE's tasks scored: prompts, few-shot draws, spans, centred accuracy (upstream's core_eval.py)
  corpus.py        an offline text corpus from what ships with Python and the installed packages
  data_origin.py   where the shards came from and which tokenizer: recorded, then checked
  dataloader.py    batches by rank: row groups strided over files and ranks
  dataset.py       shard files on disk: train/val split, generate
  download.py      FineWeb-Edu shards: parallel, resumable, retried, verified, failing fast
  evalbundle.py    the CORE eval bundle on disk (core.yaml, baselines, task files), read and checked
  evalgen.py       a small eval bundle in the real format (data generate --eval-bundle)
  evalstage.py     data download --eval-bundle: upstream's zip staged, resumed, checked
  engine.py        sampling with a KV cache and the calculator tool
  fp8.py           --fp8 / --fp8_lm_head: FP8 matmuls with tensorwise dynamic scaling
  fused.py         --fused_kernels: the hand-written Triton kernels it names (config.py FUSED_KERNELS)
  gcfreeze.py      the garbage collector frozen out of the measured steps
  gpt.py           the GPT of nanochat's base pretraining
  gptconfig.py     the GPT's shape: sizing, parameters, FLOPs per token (no torch: the planner sizes models)
  loss_eval.py     bits per byte
  memory.py        predicted peak memory per rank, per memory strategy
  memory_calibration.json  the memory model's constants (data), each with its source
  mid_train.py     mid-training on conversations (upstream's scripts/mid_train.py)
  midloader.py     mid-training's loader: whole conversations packed into rows, per rank
  muon.py          Muon and its sharded form
  network_gate.py  the trainer's side of the network gate: the ranks agree before the pre-flight
  numanode.py      a GPU worker bound to its GPU's NUMA node's CPUs where numactl is missing
  parallel.py      memory strategies (zero2, fsdp, +ac, +offload) applied from outside the model
  preflight.py     bus bandwidth of the training collectives before the first step
  profile.py       one step under torch.profiler
  sandbox.py       model-written code (HumanEval, the calculator) run fenced off from everything
  sandbox_child.py the sandboxed side: the interpreter fences itself in, then runs the program
  sftconfig.py     SFT's settings and examples-per-step arithmetic (no torch: the planner reads them)
  sftloader.py     SFT's batches: one padded conversation a row, the loss on the assistant's tokens
  sharding.py      which row groups each rank reads, and the K that serves W ranks (no torch: the planner)
  stagerun.py      what every stage does around its work: start-up, step record, end, main()
  steptimer.py     a step's split: forward+backward, exposed communication, optimizer, data wait
  strategy.py      a memory strategy's name parsed (no torch: config validation reads it)
  tokbin.py        pre-tokenized train.bin / val.bin (NanoGPT, NNTile)
  tokenizer.py     byte-level BPE, trained once, used through tiktoken
  train.py         base pretraining (upstream's scripts/base_train.py)
  watchdog.py      how long a collective may wait, from the first to the last
  tasks/           the chat tasks (upstream's tasks/*.py): SmolTalk, MMLU, GSM8K, ARC, identity, spelling, HumanEval
"""
