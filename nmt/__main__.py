from nmt.cli.main import main

main()
