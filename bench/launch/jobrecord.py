"""The batch script's own entries in run.json: Slurm facts before srun, what it saw of the end after it.

It runs on the cluster's python3 outside any container, where the package may not be installed, so
`submit`/`render` write this file and the run contract (bench/contract/, standard library only) into
`<sweep>/.lib/` once per sweep, and every batch script of the sweep calls that copy:

    python3 <sweep>/.lib/jobrecord.py start  RUN_DIR [RUNTIME_VERSION]
    python3 <sweep>/.lib/jobrecord.py finish RUN_DIR EXIT_CODE [SIGNAL]   SIGNAL: the script received it meanwhile
    python3 <sweep>/.lib/jobrecord.py kept RUN_DIR          exit 0: the run is ok already (skip it)
    python3 <sweep>/.lib/jobrecord.py resume-step RUN_DIR   the checkpoint step a resubmitted run resumes
    python3 <sweep>/.lib/jobrecord.py image RUN_DIR [--ready --step WHAT] [--file PATH] [--id ID]
                                      the image on the nodes (its start-up phase ends now), its digest or id
    python3 <sweep>/.lib/jobrecord.py not-run RUN_DIR STAGE [SIGNAL]
                                      a flow's stage kept from starting by STAGE's failure, or by SIGNAL the
                                      script received at STAGE (scancel, the job's time limit)

`finish` records what Slurm wrote into the run's log (a lost node, the time limit) as evidence, and ends
with contract.close_unfinished, the same last word the local launcher has: a run whose trainer never
started or died without a final status is marked failed, so none stays pending. How the run ended is
settled by the contract's one rule (bench/contract/outcome.py), not here.
"""

import hashlib
import json
import os
import re
import sys
import time

if __package__:
    from bench import contract
else:  # the copy beside the jobs: import the contract written next to it, never another installed one
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import contract  # noqa: E402

# Slurm's lines in the job's output and the evidence each one is, e.g. srun's `error: Node failure on nid001234`
# or `*** STEP … CANCELLED AT … DUE TO TIME LIMIT ***`
SLURM_LINES = (("Node failure on", "node_lost", "a node of the job was lost"),
               ("DUE TO NODE FAILURE", "node_lost", "a node of the job was lost"),
               ("DUE TO TIME LIMIT", "time_limit", "the run reached its time limit before finishing"))


def start(run_dir: str, runtime_version: str = "") -> None:
    """Called right before srun: its time is the launch time (T0) that start-up is measured from."""
    now = time.time()
    contract.update_run_json(run_dir, slurm=contract.slurm_facts(),
                             launch={"kind": "slurm", "started_at": now, "t0": now,
                                     "runtime_version": runtime_version or None})


def stopped_by(signal: str) -> str:
    """What sent the signal a stopped run is recorded with: Slurm's SIGTERM, or Ctrl-C in an interactive guide."""
    return "Ctrl-C in the salloc shell" if signal == "SIGINT" else "scancel, the job's time limit or a lost node"


def finish(run_dir: str, exit_code: str, signal: str = "") -> None:
    code = int(exit_code)
    # Slurm facts again: a trainer inside a container may not see them and record none.
    contract.update_run_json(run_dir, slurm=contract.slurm_facts(),
                             launch={"exit_code": code, "finished_at": time.time()})
    if signal:  # scancel or the job's end stopped srun, perhaps before the trainer could record anything
        contract.record_evidence(run_dir, contract.Evidence(
            source="batch_script", kind="stopped", signal=signal, exit_code=code,
            message=f"the batch script received {signal} ({stopped_by(signal)}) while the run went on; "
                    f"srun exit code {code}"))
    tail = contract.log_tail(os.path.join(run_dir, contract.TRAIN_LOG))
    seen = set()
    for marker, kind, what in SLURM_LINES:
        line = next((text.strip() for text in tail.splitlines() if marker in text), "")
        if line and kind not in seen:
            seen.add(kind)
            node = re.search(r"Node failure on (\S+)", line)  # the node a resubmission excludes
            contract.record_evidence(run_dir, contract.Evidence(source="batch_script", kind=kind, exit_code=code,
                                                                node=node.group(1) if node else None,
                                                                message=f"{what}: {line}"))
    contract.close_unfinished(run_dir, code, "srun", source="batch_script")


def _damaged(run_dir: str, e: Exception, what: str = "read") -> None:
    """One line on stderr naming run.json and what is wrong with it: the job's log gets no traceback."""
    if isinstance(e, OSError):
        e = f"{os.path.join(run_dir, contract.RUN_JSON)} cannot be {what}: {e.strerror or e}"
    print(e, file=sys.stderr)


def _read(run_dir: str) -> dict:
    """run.json, or {} after one line naming it on stderr where it is damaged: a run whose record cannot be read
    is neither kept nor resumed, as one without a record."""
    try:
        return contract.read_run_json(run_dir)
    except (contract.RunJsonError, OSError) as e:
        _damaged(run_dir, e)
        return {}


def kept(run_dir: str) -> int:
    """Exit 0 when the run already ended `ok` (an earlier attempt of a resubmitted job): the script skips it."""
    return 0 if _read(run_dir).get("status") == "ok" else 1


def resume_step(run_dir: str) -> None:
    """Print the step a resubmitted run continues from (its checkpoint), or nothing."""
    step = (_read(run_dir).get("launch") or {}).get("resume_from_step")  # launch: an object or null, as read
    if type(step) is int:  # a bool is no step
        print(step)
    elif step is not None:  # a damaged record resumes nothing, as one that cannot be read
        print(f"{os.path.join(run_dir, contract.RUN_JSON)}: launch.resume_from_step is {json.dumps(step)[:80]}, "
              "not an integer (a checkpoint's step) or null; the run is not resumed from a checkpoint", file=sys.stderr)


def image(run_dir: str, *options: str) -> None:
    """What the run's image step did: `--ready` (the image is where the run runs: launch.image_ready_at, the end of
    the start-up phase image_ready) with `--step WHAT`; `--file PATH` (the image file: its sha256 is the digest);
    `--id ID` (the engine's image id). A fact that cannot be read is left out: bookkeeping never fails a run."""
    rest = [o for o in options if o != "--ready"]
    opts = dict(zip(rest[::2], rest[1::2]))
    launch = {"image_ready_at": time.time(), "image_step": opts.get("--step")} if "--ready" in options else None
    found = {}
    if opts.get("--file"):
        found["digest"] = file_digest(opts["--file"], os.path.dirname(os.path.abspath(run_dir)))
        found["file"] = opts["--file"]
    if opts.get("--id"):
        found["id"] = opts["--id"]
    contract.update_run_json(run_dir, launch=launch, image=found or None)


IMAGES_DIR = ".images"  # <sweep>/.images (bench/runtimes/base.py): images made once per sweep, and their digests


def file_digest(path: str, sweep_dir: str) -> "str | None":
    """`sha256:<hex>` of an image file, computed once per sweep: kept in <sweep>/.images/ under the file's path,
    size and modification time, so the sweep's other runs (and a rewritten file) are answered right."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = hashlib.sha256(f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:32]
    cache = os.path.join(sweep_dir, IMAGES_DIR, f"digest-{key}.json")
    try:
        with open(cache) as f:
            return json.load(f)["digest"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
    except OSError:
        return None
    digest = f"sha256:{h.hexdigest()}"
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        contract.write_json_atomic(cache, {"path": os.path.abspath(path), "size": st.st_size,
                                           "mtime_ns": st.st_mtime_ns, "digest": digest})
    except OSError:
        pass  # a read-only sweep directory: the next run hashes again
    return digest


def not_run(run_dir: str, failed_stage: str, signal: str = "", *, source: str = "batch_script",
            cancelled_by: "str | None" = None) -> None:
    """A stage of a flow that does not start because an earlier stage of its point did not end ok, or because
    the batch script received `signal` while at that stage (the local flow records it too, as `launcher`).
    `cancelled_by`: that earlier stage ended cancelled, by this signal ("": its run.json names none)."""
    why = f"stage {failed_stage} of this point did not end ok (its run.json says why)"
    if cancelled_by is not None:  # a Ctrl-C in the stage: said as one between stages is, not as a failure
        why = f"stage {failed_stage} of this point was cancelled" + (f" ({cancelled_by})" if cancelled_by else "")
        signal = signal or cancelled_by
    elif signal and source == "launcher":  # `speedrun` stopped outside a stage: failed_stage says where it was
        why = f"nanochat-bench speedrun received {signal} at {failed_stage}, so no later stage started"
    elif signal:
        why = f"the batch script received {signal} ({stopped_by(signal)}) at stage {failed_stage} of this point, " \
              f"so no later stage started"
    contract.record_evidence(run_dir, contract.Evidence(source=source, kind="not_run", signal=signal or None,
                                                        message=f"not run: {why}"))


COMMANDS = {"start": start, "finish": finish, "kept": kept, "resume-step": resume_step, "image": image,
            "not-run": not_run}


def main(argv) -> int:
    if len(argv) < 2 or argv[0] not in COMMANDS:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return COMMANDS[argv[0]](*argv[1:]) or 0
    except (contract.RunJsonError, contract.SchemaError, OSError) as e:
        # a damaged record (not JSON, a field of the wrong shape, a newer major's) or one that cannot be read or
        # written: bookkeeping never ends the batch script (set -e would), the run goes on unrecorded
        _damaged(argv[1], e, "read or written")
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
