"""The app tier's worker imports this module (ANISO_JOB_MODULES=synthetic_jobs): its "analyze" jobs run
on synthetic statistics (synthetic_runs.job_analyze). The test process never imports it, so the kind is
switched there only while the app tier runs (tests/app/conftest.py)."""

import synthetic_runs

synthetic_runs.use_synthetic_analyze()
