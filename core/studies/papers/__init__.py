"""The papers reproduced in one click: `python -m core reproduce NAME` and the Papers page.

    claims  numpy only: the claims tables computed from measured numbers (no verdict is typed in)
    run     the reproductions themselves (one job each, cached like any run): which runs, how they
            share documents, decoded images and audio, and what each record keeps

Importing this package imports nothing else (the unit tests read `claims` with numpy alone).
"""
