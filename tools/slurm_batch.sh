#!/usr/bin/env bash
# Training as a Slurm batch job that survives preemption: from the repository root, in a shell whose
# python has mmvisattn (sbatch hands the job this shell's environment),
#     sbatch [sbatch options] tools/slurm_batch.sh CONFIG WORK_DIR [train.py args...]
# Slurm sends SIGUSR1 two minutes before the time limit (and SIGTERM at preemption): every task
# finishes its iteration, one checkpoint of it is written, and the job requeues itself; the requeued
# job resumes from that checkpoint by itself. Options on the sbatch command line override these.
#SBATCH --job-name=mmvisattn
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gres=gpu:8
#SBATCH --cpus-per-task=5
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.out
srun --kill-on-bad-exit=1 "${PYTHON:-python}" -u tools/train.py "$1" --work-dir "$2" --launcher slurm --requeue "${@:3}"
