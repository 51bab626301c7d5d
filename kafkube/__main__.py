from kafkube.cli import main

raise SystemExit(main())
