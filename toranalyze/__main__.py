from toranalyze.cli import main

main()
