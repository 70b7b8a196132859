"""racklife's cluster stack (`pulumi up` here, or `racklife up --stack NAME`): reads config once, builds it."""

from stacks.racklife_pulumi.program import main

main()
