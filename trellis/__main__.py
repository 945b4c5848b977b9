from trellis.cli import main

raise SystemExit(main())
