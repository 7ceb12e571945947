"""The cluster fixtures (a fake API server, the byo stack's rendered jobs) for the commands' tests."""

from tests.cluster.conftest import api_server, byo_target, rendered, rendered_c10d, rendered_per_step  # noqa: F401
