from deployopt.cli.main import main

main()
