import pytest

from tests.core.toys import register_toys, unregister_toys


@pytest.fixture
def toys():
    yield register_toys()
    unregister_toys()
