"""A multi-host testbed on one Linux machine: network namespaces as hosts, shaped links.

`python -m app.testbed up --hosts 3 --rate 10gbit [--sshd]`, `... down`, `... status`,
`... exec h1 -- CMD`: see `app.testbed.__main__`. Needs root and network namespaces.
"""

from app.testbed.net import DEFAULT_PREFIX, DEFAULT_SUBNET, Testbed, TestbedError

__all__ = ["DEFAULT_PREFIX", "DEFAULT_SUBNET", "Testbed", "TestbedError"]
