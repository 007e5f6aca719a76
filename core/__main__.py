import os
import sys

from .compute.distributed import world_size_from_env
from .entry.cli import main

if world_size_from_env() > 1:
    # A rank of a torchrun job leaves without the interpreter's finalization. gloo's worker threads may still
    # release a finished collective's tensors (Python objects: the GIL is needed) while the interpreter is
    # torn down, which aborts the process (SIGABRT). Seen twice in whole-suite runs on loaded machines, once
    # after core.compute.ranks.Group.close's barrier and destroy_process_group. By then rank 0 has written
    # everything (the cache is committed, --out written); the streams are flushed here.
    try:
        code = main()
    except SystemExit as e:  # argparse's --help and usage errors; a message is printed, with status 1, as Python does
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - an unexpected failure: its traceback, then the exit status Python gives it
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(main())
