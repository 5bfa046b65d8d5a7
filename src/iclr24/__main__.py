from iclr24.cli import main

main()
