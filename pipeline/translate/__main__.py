from pipeline.translate.cli import main

main()
