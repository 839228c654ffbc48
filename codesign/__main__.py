from codesign.cli import main

main()
