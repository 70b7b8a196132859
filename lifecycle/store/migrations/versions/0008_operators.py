"""The operator's name in the history: a column of transitions and record changes, and who started each run.

Rows written before this revision (0008) have no operator (NULL: `node history` shows "-").
Revision 0008, after 0007; created 2026-12-01.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('racklife_run_operators',
    sa.Column('run_id', sa.String(length=128), nullable=False),
    sa.Column('operator', sa.String(length=128), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('run_id')
    )
    with op.batch_alter_table('racklife_transitions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('operator', sa.String(length=128), nullable=True))
    with op.batch_alter_table('racklife_node_changes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('operator', sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('racklife_node_changes', schema=None) as batch_op:
        batch_op.drop_column('operator')
    with op.batch_alter_table('racklife_transitions', schema=None) as batch_op:
        batch_op.drop_column('operator')
    op.drop_table('racklife_run_operators')
