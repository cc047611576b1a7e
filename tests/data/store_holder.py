"""A second process for the writer-lock tests, driven line by line over stdin/stdout.

    python -m tests.data.store_holder STORE_PATH
    stdin:  "open a" | "open w"  -> "opened" or "locked"   (append one episode after opening)
            "close"              -> "closed"
    EOF ends it. Every command is answered, so the test never waits on time, only on a reply.
"""

import sys

from embodied.data.store import EpisodeStore
from tests.data.crash_writer import episode


def main(path: str) -> None:
    store = None
    for line in sys.stdin:
        command, *arg = line.split()
        if command == "open":
            try:
                store = EpisodeStore(path, mode=arg[0])
            except RuntimeError as err:
                assert "already open for writing" in str(err), err
                print("locked", flush=True)
                continue
            store.append_episode(episode(store.num_episodes))
            print("opened", flush=True)
        elif command == "close":
            store.close()
            print("closed", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
