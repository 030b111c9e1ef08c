"""One broker for the CLI tests, started and stopped with the real ``mq up``/``mq down``.

``mq up`` runs into a temporary data dir on a free port for the whole session, so the
launcher is exercised by every test run; ``mq down`` stops it at the end.
"""

from __future__ import annotations

import pytest

from .helpers import LocalCluster, base_env, free_listen, run_mq


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("mq-cli")
    data_dir = root / ".mq"
    listen = free_listen()
    env = base_env(MQ_BOOTSTRAP=listen)
    up = run_mq("up", "--data-dir", str(data_dir), "--listen", listen, env=env, timeout=60)
    assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
    try:
        yield LocalCluster(data_dir=data_dir, listen=listen, env=env)
    finally:
        down = run_mq("down", "--data-dir", str(data_dir), env=env, timeout=60)
        assert down.returncode == 0, (down.stdout + down.stderr).decode(errors="replace")
