"""Launching sweeps: plan (points and batch arithmetic), render (slurm/ templates), submit and status
through Slurm's command line, and the local launcher for machines without Slurm.

    scaling.py   total_batch_size kept fixed: device batch and gradient accumulation per point
    plan.py      a sweep as data (nodes x runtimes x repeats), its table and node-hour estimate
    job.py       a point -> torchrun command, runtime launch spec, exports, #SBATCH lines, run.json
    render.py    jobs -> shell text through slurm/*.j2
    jobrecord.py the batch script's own run.json step (standard library only, pasted into scripts)
    slurm.py     sbatch --parsable, squeue --json, scontrol show job -o (pyslurm_backend.py optional)
    submit.py    a sweep directory, sweep.json, submission and resubmission
    status.py    run statuses next to job states, to completion
"""
