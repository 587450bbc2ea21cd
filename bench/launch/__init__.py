"""Launching sweeps: plan (the product of axes, Slurm times, the table), one job assembly, render
(slurm/ templates), submit and status through Slurm's command line, and the local launcher.

    plan.py      a sweep as data (nodes x runtimes x repeats), frozen; each point planned by its workload
    job.py       a point -> runtime launch spec, exports, #SBATCH lines, run.json; `assemble`: a sweep's jobs
    render.py    jobs -> shell text through slurm/*.j2
    flow.py      a flow (the speedrun): its stages in turn per point, one job each, or on this machine
    flowrender.py a flow's job -> shell text (slurm/flow.sh.j2, flow_interactive.sh.j2)
    jobrecord.py the batch script's own run.json step (standard library only, shipped in <sweep>/.lib)
    rdzvport.py  the rendezvous port checked free on the first node (standard library only, in .lib too)
    numabind.py  torchrun's --numa-binding only where numactl is there, every NUMA node has CPUs and, among
                 several, every GPU names its node; else each worker binds itself
    elastic.py   torchrun, ending in one line that says how the ranks ended
    local.py     a run on this machine, without Slurm
    slurm.py     sbatch --parsable, squeue --json, scontrol show job -o
    submit.py    a sweep directory, sweep.json, submission and resubmission
    status.py    run statuses next to job states, to completion
"""
