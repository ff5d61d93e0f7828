from toranalyze.launch import main

main()
