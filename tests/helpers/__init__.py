"""What the tests share: processes and jobs, ports, small disks, toy graphs and models,
partition writers and checks, the distributed-test harness, torchrun and hosts' command lines.

Test modules import from here and never from one another (tests/unit/test_test_rules.py).
"""
