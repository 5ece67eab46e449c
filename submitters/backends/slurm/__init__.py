"""The ``slurm`` backend: the batch calls (``backend``) and the pure text handling of Slurm's commands
(``parse``: sbatch arguments, squeue/sacct/sinfo output, failure classification)."""
