from pmoss.cli import main

main()
