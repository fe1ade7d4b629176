from queue_controller.cli import main

main()
