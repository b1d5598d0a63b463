from tokrate.cli import main

raise SystemExit(main())
