"""A run's start-up and training time, cut at its milestones: launch (T0) -> ... -> end.

The milestones, in the order a run passes them (run.json's launch.t0, then metrics.jsonl events):
  launch        the launcher, before the image step and srun / torchrun (launch.t0)
  image_ready   the image is where the run runs (launch.image_ready_at): a podman load on the nodes, an import
                made once per sweep (absent where the runtime brings its image itself)
  runtime_start the first process inside the runtime (torchrun's agent): the container's start-up before it
  start         the trainer process: torchrun's own start and its workers' spawn before it
  imports_done  the trainer's imports (torch) done
  dist_init     the process group up
  preflight     the communication pre-flight done (absent with --preflight=0)
  model_ready   tokenizer and model built
  data_ready    loaders built, first batch in hand
  first_step    the first optimizer step done: compilation, mostly
  steady        the warm-up steps done
  end           the last step done
  finished      the launcher saw the run end (launch.finished_at): process group, interpreter and runtime gone
Each phase is named after the milestone that ends it and lasts from the one before it that the run has,
so the phases of a run add up to end - launch exactly, whatever it skipped. Standard library only: the
trainer writes the result into run.json, the analysis computes the same from the events.
"""

from typing import Dict, Optional

MILESTONES = ("launch", "image_ready", "runtime_start", "start", "imports_done", "dist_init", "preflight",
              "model_ready", "data_ready", "first_step", "steady", "end", "finished")
LABELS = {"image_ready": "image on the nodes", "runtime_start": "runtime start-up", "start": "torchrun and spawn",
          "imports_done": "Python imports", "dist_init": "process group", "preflight": "pre-flight",
          "model_ready": "model build", "data_ready": "data loaders", "first_step": "first step (compile)",
          "steady": "warm-up steps", "end": "steady training", "finished": "teardown"}

# taken by the launcher on the batch host; the other milestones by rank 0 on its node, with its own clock
LAUNCHER = frozenset({"launch", "image_ready", "finished"})


def phases(times: Dict[str, Optional[float]]) -> Dict[str, float]:
    """{milestone: seconds since the previous milestone the run reached}, in MILESTONES order; `times` maps
    milestone names to epoch seconds (missing or None: not reached, or not recorded)."""
    out: Dict[str, float] = {}
    previous = None
    for name in MILESTONES:
        t = times.get(name)
        if t is None:
            continue
        if previous is not None:
            out[name] = t - previous
        previous = t
    return out


def across_hosts(times: Dict[str, Optional[float]]) -> set:
    """The phases of phases(times) measured from one host's clock to the other's: off by any skew between them."""
    names = [m for m in MILESTONES if times.get(m) is not None]
    return {b for a, b in zip(names, names[1:]) if (a in LAUNCHER) != (b in LAUNCHER)}
