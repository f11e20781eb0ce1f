from deployopt.cli.main import entry

entry()
