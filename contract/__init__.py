"""The run contract: what a run, the sweep engine and the analysis agree on, at the bottom of the suite.

It imports neither torch nor Lightning (nor anything of the suite), so every layer may import it: the
run folder's file names and a run's status (`run_folder`), the environment variables between a sweep and
its runs (`run_folder`), the typed `run.json` (`run_record.RunRecord`), atomic writes (`files`), the git
facts a run records (`git`), which way each metric improves (`metrics`), and the conventions data and
models share without knowing each other (`errors.ConfigError`, `labels.IGNORE_INDEX`).
"""
