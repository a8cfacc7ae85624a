"""Every flag of the installed torchrun is a flag of cohortrun: this reads torchrun's own argument
parser (torch.distributed.run.get_args_parser()) and, for every option string it has, runs
`cohortrun <option> [value] --help`, which exits 0 only when cohortrun accepted the option (and
its value). Options torchrun reads from PET_<NAME> are also given that way. Fails naming each
flag cohortrun does not take. Usage: torchrun_flags.py COHORTRUN_BINARY"""
import argparse
import os
import subprocess
import sys
import unittest

from torch.distributed.run import get_args_parser

COHORTRUN = sys.argv.pop(1) if len(sys.argv) > 1 else "build/bin/cohortrun"

# Values for options whose default would not do (None, or a default that is not a value).
VALUES = {
    "--rdzv-endpoint": "127.0.0.1:29400",
    "--rdzv_endpoint": "127.0.0.1:29400",
    "--log-dir": "/tmp",
    "--log_dir": "/tmp",
    "--local-addr": "127.0.0.1",
    "--local_addr": "127.0.0.1",
    "--master-port": "29500",
    "--master_port": "29500",
    "--logs-specs": "default",
    "--logs_specs": "default",
    "--shutdown-timeout": "30",
    "--shutdown_timeout": "30",
    "--local-ranks-filter": "0",
    "--local_ranks_filter": "0",
    "--duplicate-stdout-filters": "loss",
    "--duplicate_stdout_filters": "loss",
    "--duplicate-stderr-filters": "Error",
    "--duplicate_stderr_filters": "Error",
    "--log-line-prefix-template": "[${rank}]:",
    "--log_line_prefix_template": "[${rank}]:",
}


def takes_value(action):
    return action.nargs != 0 and not isinstance(
        action, (argparse._StoreTrueAction, argparse._StoreFalseAction))


def value_for(option, action):
    if option in VALUES:
        return VALUES[option]
    if action.choices:
        return str(sorted(action.choices)[0])
    if action.default not in (None, [], ""):
        return str(action.default)
    return "1"


def options():
    for action in get_args_parser()._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        yield action


class TorchrunFlagsAreCohortrunFlags(unittest.TestCase):
    def run_cohortrun(self, args, env=None):
        return subprocess.run([COHORTRUN, *args], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, **(env or {})))

    def test_every_option_string(self):
        missing = []
        for action in options():
            for option in action.option_strings:
                args = [option]
                if takes_value(action):
                    args.append(value_for(option, action))
                if "completion" not in option:
                    args.append("--help")
                r = self.run_cohortrun(args)
                if r.returncode != 0:
                    missing.append(f"{' '.join(args)}: {r.stderr.strip()}")
        self.assertEqual(missing, [], "torchrun flags cohortrun does not take")

    def test_every_pet_variable(self):
        """torchrun's `env` actions read PET_<NAME> (the dashed name, upper case)."""
        missing = []
        for action in options():
            if type(action).__name__ not in ("env", "check_env"):
                continue
            option = next(o for o in action.option_strings if o.startswith("--"))
            name = "PET_" + option[2:].replace("-", "_").upper()
            value = value_for(option, action) if takes_value(action) else "1"
            r = self.run_cohortrun(["--help"], env={name: value})
            if r.returncode != 0:
                missing.append(f"{name}={value}: {r.stderr.strip()}")
        self.assertEqual(missing, [], "PET_ variables cohortrun refuses")


if __name__ == "__main__":
    unittest.main()
