"""The ``queue-controller`` command line.

User mistakes (a bad file, a bad field) end with one line naming the object
and the field, and exit code 2; they never end in a traceback.
"""

from __future__ import annotations

import sys

import click

from queue_controller import __version__
from queue_controller.cli.chaos import chaos_group
from queue_controller.cli.check import check
from queue_controller.cli.eta import eta
from queue_controller.cli.history import history
from queue_controller.cli.localcluster import local_cluster
from queue_controller.cli.nodeagent import node_agent
from queue_controller.cli.plan import plan
from queue_controller.cli.run import run
from queue_controller.cli.simulate import simulate
from queue_controller.errors import InputError, QueueControllerError

EXIT_INPUT_ERROR = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="queue-controller")
def cli() -> None:
    """Gang admission for Kubernetes GPU clusters.

    Jobs labelled with a queue are held suspended and admitted as whole gangs,
    only when every member pod fits on a real node at once and the team quota
    has room.
    """


cli.add_command(plan)
cli.add_command(check)
cli.add_command(eta)
cli.add_command(chaos_group, name="chaos")
cli.add_command(run)
cli.add_command(local_cluster)
cli.add_command(history)
cli.add_command(simulate)
cli.add_command(node_agent)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except InputError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(EXIT_INPUT_ERROR)
    except QueueControllerError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
